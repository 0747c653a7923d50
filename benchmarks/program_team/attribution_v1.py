"""The attribution table of finished ``support-desk-v1`` jobs: each agent alone reverted to the
untuned model and alone tuned, on the job's 200 held-out tasks, greedy (``marft eval RUN
--attribution``, with the benchmark's env ids registered).

Reads ``results/v1/runs/<setting>-seed<k>/`` (the final checkpoint) and writes
``results/v1/attribution-<setting>-seed<k>.json``: ``marft eval``'s JSON, whose
``attribution.greedy`` rows hold each setting's success rate and its paired difference to the
tuned team.

    python benchmarks/program_team/attribution_v1.py --jobs marft:0 grpo:0

Nothing has been measured with it yet (2026-11-28): its first try failed until ``marft eval``
learned to rebuild a registered program env from a run record.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import team_v1  # noqa: E402

from marft_algos.cli.evaluate import main as evaluate  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", nargs="+", required=True, metavar="SETTING:SEED")
    parser.add_argument("--results", type=Path, default=HERE / "results" / "v1")
    args = parser.parse_args()
    team_v1.register()
    for job in args.jobs:
        setting, _, seed = job.partition(":")
        name = f"{setting}-seed{seed}"
        run = args.results / "runs" / name
        out = args.results / f"attribution-{name}.json"
        start = time.perf_counter()
        evaluate([str(run), "--attribution", "--threads", "1", "--json", str(out)])
        record = json.loads(out.read_text())
        record["seconds"] = round(time.perf_counter() - start, 1)
        out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
