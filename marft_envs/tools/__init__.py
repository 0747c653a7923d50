"""Tool use: agents call a Python tool (run in the code sandbox) and read its output in the episode."""

from marft_envs.tools.calls import ToolResult, find_tool_call, run_expression
from marft_envs.tools.env import ToolMathEnv, ToolRouter

__all__ = ["ToolMathEnv", "ToolResult", "ToolRouter", "find_tool_call", "run_expression"]
