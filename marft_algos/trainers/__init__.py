"""Trainers: the shared loop (:mod:`~marft_algos.trainers.base`), its checkpointing and guards,
the policy-gradient update, action- and token-level MARFT and PPO (actor-critic), GRPO, RLOO and
REINFORCE++ (critic-free), and the registry of algorithm names (:mod:`~marft_algos.trainers.registry`).

Every trainer and its config also import from the package root (``from marft_algos import
GRPOTrainer``)."""
