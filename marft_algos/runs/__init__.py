"""Run folders: the locked folder itself (:mod:`~marft_algos.runs.folder`), checkpoints with
checksums (:mod:`~marft_algos.runs.checkpoint`), ``metrics.jsonl`` and the table of metric names
(:mod:`~marft_algos.runs.metrics`), transcripts (:mod:`~marft_algos.runs.samples`), progress
reporting (:mod:`~marft_algos.runs.progress`) and learning-curve plots
(:mod:`~marft_algos.runs.plotting`)."""
