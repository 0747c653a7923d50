"""The sandbox that runs untrusted programs, shared by the code envs (``code/``) and the tool-use
envs (``tools/``): a private root, namespaces, a memory cgroup and resource limits per run
(see :mod:`marft_envs.sandbox.runner` and :mod:`marft_envs.sandbox.confinement`)."""

from marft_envs.sandbox.runner import (
    Sandbox,
    SandboxLimits,
    SandboxResult,
    UnitTests,
    default_sandbox,
    namespaces_available,
)

__all__ = [
    "Sandbox",
    "SandboxLimits",
    "SandboxResult",
    "UnitTests",
    "default_sandbox",
    "namespaces_available",
]
