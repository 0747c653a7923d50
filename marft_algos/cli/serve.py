"""``marft serve RUN_OR_EXPORT``: the trained team behind an OpenAI-compatible endpoint.

The agent program runs unchanged against it: ``openai.OpenAI(base_url="http://127.0.0.1:8000/v1",
api_key=KEY)``, each ``model`` an agent (:mod:`marft_algos.serving`). This module only parses the
flags, finds what to load, and runs the server until Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from marft_algos.cli.parsing import UsageError, build_parser, parse_with, pick
from marft_envs.wire.protocol import RequestLimits

__all__ = ["ServeArguments", "load_team", "main"]

#: Environment variable holding the API key when --api-key is not given.
API_KEY_VARIABLE = "MARFT_API_KEY"


@dataclass
class ServeArguments:
    """Where to listen and what to load."""

    host: str = "127.0.0.1"
    """Address to bind (0.0.0.0 listens on every interface: set an API key, and put TLS in front)."""
    port: int = 8000
    """Port to listen on (0: any free port, printed at start)."""
    api_key: str | None = None
    """Require 'Authorization: Bearer KEY' on every request (default: $MARFT_API_KEY; neither: open)."""
    max_body_bytes: int = RequestLimits.max_request_bytes
    """Largest request body in bytes (larger: HTTP 413; RequestLimits.max_request_bytes, the training endpoint's default)."""
    max_messages: int = RequestLimits.max_messages
    """Most messages in one call (more: HTTP 400; RequestLimits.max_messages, the training endpoint's default)."""
    max_batch: int = 8
    """Most concurrent calls of one agent generated together."""
    max_prompt_tokens: int | None = None
    """Tokens of one rendered prompt (more: HTTP 400) (default: the run's max_prompt_tokens; a prompt is always bounded by the model's context less the agent's reply budget)."""
    shutdown_timeout: float = 3.0
    """Seconds a stop (Ctrl-C, SIGTERM) waits for the batch generating before its calls are answered 503."""
    model: str | None = None
    """Base model path replacing the recorded one (same model, moved)."""
    device: str | None = None
    """Torch device (default: cuda if the run trained on a GPU and one is here, else cpu)."""
    dtype: Literal["float32", "bfloat16", "float16"] | None = None
    """Weight dtype (default: the run's)."""
    threads: int | None = None
    """Torch CPU threads (default: torch's own)."""
    trace_otlp: str | None = field(default=None, metadata={"nargs": "?", "const": ""})
    """Send every served call as an OpenTelemetry span over OTLP/HTTP to this collector's URL (the flag without a URL: the endpoint of the standard OTEL_EXPORTER_OTLP_* variables); needs the otel extra (docs/tracing.md)."""
    trace_file: str | None = None
    """Append every served call's span to this file, one OTLP/JSON request per line (docs/tracing.md)."""
    trace_content: bool = False
    """Record message text in the spans; also on with OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true."""

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise UsageError(f"--port {self.port}: must be in 0..65535.")
        if not self.shutdown_timeout >= 0:
            raise UsageError(f"--shutdown-timeout {self.shutdown_timeout}: must be >= 0 seconds.")
        for name in ("max_body_bytes", "max_messages", "max_batch", "max_prompt_tokens", "threads"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise UsageError(f"--{name.replace('_', '-')} {value}: must be >= 1.")
        if self.api_key == "":
            raise UsageError("--api-key is empty; pass a key, or leave the flag out.")
        self.trace_settings()

    def trace_settings(self) -> Any:
        """Where the calls' spans go (:class:`~marft_algos.runs.trace_settings.TraceSettings`)."""
        from marft_algos.runs.tracing import TraceSettings

        try:
            return TraceSettings(self.trace_otlp, self.trace_file, self.trace_content)
        except ValueError as err:
            raise UsageError(str(err)) from None

    def limits(self) -> RequestLimits:
        """The request bounds the flags spell (``--max-body-bytes`` is ``max_request_bytes``)."""
        return RequestLimits(max_request_bytes=self.max_body_bytes, max_messages=self.max_messages)


def load_team(path: str, args: ServeArguments) -> Any:
    """The team of an export folder, a checkpoint, or a run folder's newest checkpoint."""
    from marft_algos.cli.evaluate import open_checkpoint, run_device_and_dtype
    from marft_algos.serving import is_export, team_from_checkpoint, team_from_export

    if is_export(path):
        import json

        from marft_algos.serving import EXPORT_INDEX

        run = json.loads((Path(path) / EXPORT_INDEX).read_text()).get("run") or {}
        device, dtype = run_device_and_dtype(run, args.device, args.dtype)
        return team_from_export(path, model=args.model, device=device, dtype=dtype)
    with open_checkpoint(path) as checkpoint:
        from marft_algos.runs.checkpoint import read_manifest

        run = read_manifest(checkpoint).get("run") or {}
        device, dtype = run_device_and_dtype(run, args.device, args.dtype)
        return team_from_checkpoint(checkpoint, model=args.model, device=device, dtype=dtype)


def main(argv: Sequence[str] | None = None) -> None:
    """Run ``marft serve RUN_OR_EXPORT`` until Ctrl-C or SIGTERM."""
    import torch
    from rich.console import Console

    from marft_algos.runs.tracing import episode_tracer
    from marft_algos.serving import serve
    from marft_algos.serving.server import is_loopback

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(
        [ServeArguments],
        prog="marft serve",
        description="Serve a trained team on an OpenAI-compatible endpoint (model = agent).",
    )
    parser.add_argument(
        "run", help="A run folder, a checkpoint-N folder, or a marft export folder."
    )
    values, _ = parse_with(parser, argv)
    args = ServeArguments(**pick(values, ServeArguments))
    api_key = args.api_key or os.environ.get(API_KEY_VARIABLE) or None
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    team = load_team(values["run"], args)
    if args.max_prompt_tokens is not None:
        team.max_prompt_tokens = args.max_prompt_tokens
    console = Console(stderr=True)
    if not is_loopback(args.host) and api_key is None:
        console.print(
            f"[yellow]warning:[/] serving on {args.host} without an API key: anyone who reaches "
            f"the port can use the team (set --api-key or ${API_KEY_VARIABLE})."
        )

    def announce(url: str) -> None:
        console.print(
            f"serving {team.source} ({team.env_id}): agents {', '.join(team.agents)} at {url} "
            f"{'(API key required)' if api_key else '(no API key)'}; Ctrl-C stops",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )

    tracer = episode_tracer(args.trace_settings())
    try:
        generating = serve(
            team,
            host=args.host,
            port=args.port,
            api_key=api_key,
            limits=args.limits(),
            max_batch=args.max_batch,
            announce=announce,
            shutdown_timeout=args.shutdown_timeout,
            tracer=tracer,
        )
    finally:
        tracer.close()  # exports the calls' spans still queued
    if generating:  # answered already; torch aborts if finalisation tears its thread down
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
