#!/usr/bin/env bash
# Every number of RESULTS.md, one command (2-core CPU, one torch thread; about 30 minutes):
#   bash benchmarks/tool_calls/run.sh [SEED]
# 1. the untuned model on the 60 held-out tasks, three prompts, greedy and T = 1;
# 2. the recipe: GRPO on tool-lookup-recipe-v0, reward success + 0.2 x tool_call;
# 3. the tuned and the untuned model, greedy, paired on the same 60 held-out tasks (the
#    held-out measurement is measure.py's: marft train evaluates only 1 episode, to save time).
set -euo pipefail
cd "$(dirname "$0")"
SEED="${1:-0}"
PY="${PYTHON:-python}"
RUN="results/runs/recipe-seed${SEED}"
"$PY" measure.py untuned --envs tool-lookup-v0 tool-lookup-example-v0
"$PY" -m marft_algos.cli.main train --env tool_task:tool-lookup-recipe-v0 \
    --model smollm2-135m-instruct --algo grpo \
    --env-kwargs '{"reward_weights": {"tool_call": 0.2, "right_call": 0.0}}' \
    --iterations 6 --episodes-per-iteration 16 --num-generations 4 --max-new-tokens 48 \
    --rollout-threads 32 \
    --learning-rate 5e-4 --eval-every 0 --eval-episodes 1 --no-eval-sampled \
    --seed "$SEED" --threads 1 --progress plain --output-dir "$RUN" --overwrite
"$PY" measure.py tuned "$RUN" --out "results/tuned-seed${SEED}.json"
