"""``marft serve`` stops on one signal even mid-generation: the call generating is answered (an
error) and the process exits within seconds, with no traceback logged."""

from __future__ import annotations

import json
import signal
import threading
import time

import httpx
import pytest
from serve_process import start_serve

from marft_algos.policy.tiny import tiny_model_path


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    """An export of an untrained team on the built-in tiny model whose writer may write 4000
    tokens (about a minute on a CPU core: far longer than a stop may take)."""
    folder = tmp_path_factory.mktemp("export")
    base = str(tiny_model_path())
    index = {
        "agents": {a: {"base_model": base, "adapter": None} for a in ("writer", "reader")},
        "run": {
            "generation": {
                "max_new_tokens": 8,
                "do_sample": False,
                "max_new_tokens_per_agent": {"writer": 4000},
            },
            "dtype": "float32",
        },
    }
    (folder / "marft_export.json").write_text(json.dumps(index))
    return folder


# SIGINT takes the same handler as SIGTERM: -m slow (the suite's time).
@pytest.mark.parametrize(
    "stop", [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow)]
)
def test_one_signal_stops_serving_mid_generation(export, stop):
    process, url = start_serve([str(export), "--port", "0", "--shutdown-timeout", "1"])
    answers: list[int] = []
    body = {"model": "writer", "messages": [{"role": "user", "content": "a long story"}]}
    call = threading.Thread(
        target=lambda: answers.append(
            httpx.post(f"{url}/chat/completions", json=body, timeout=300).status_code
        )
    )
    try:
        call.start()
        time.sleep(1.0)  # the call is queued or generating: 4000 tokens take far longer
        assert not answers
        stopped_at = time.monotonic()
        process.send_signal(stop)
        code = process.wait(60)
        took = time.monotonic() - stopped_at
        call.join(60)
        errors = process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert code == 0, errors
    assert "Traceback" not in errors, errors
    assert answers == [503]  # the call in flight got an error, not a hang
    assert took < 30, f"marft serve took {took:.0f} s to stop"


def test_the_prompt_bound_and_stop_flags_are_checked():
    from marft_algos.cli.parsing import UsageError
    from marft_algos.cli.serve import ServeArguments

    with pytest.raises(UsageError, match="--max-prompt-tokens 0"):
        ServeArguments(max_prompt_tokens=0)
    with pytest.raises(UsageError, match="--shutdown-timeout -1"):
        ServeArguments(shutdown_timeout=-1)
