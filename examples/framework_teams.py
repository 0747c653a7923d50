"""Train a team written with an agent framework, over marft's OpenAI-compatible endpoint.

    pip install 'marft[agents]'
    python examples/framework_teams.py --env helpdesk-langgraph-v0
    python examples/framework_teams.py --env helpdesk-agents-sdk-v0 --algo grpo --num-generations 4
    python examples/framework_teams.py --env helpdesk-handoff-v0

The help desk of ``examples/program_team.py`` (planner -> math or writing specialist -> critic,
reward: success minus 0.02 per call), three times more, as the frameworks' users write it:

- ``helpdesk-langgraph-v0``: a LangGraph graph whose nodes call ``ChatOpenAI``;
- ``helpdesk-agents-sdk-v0``: OpenAI Agents SDK agents run one after the other by ``Runner``;
- ``helpdesk-responses-v0``: the same hand-off with the Agents SDK as it comes (its default model,
  ``OpenAIResponsesModel``, which calls ``/v1/responses``), the math specialist with a
  ``calculate`` function tool;
- ``helpdesk-handoff-v0``: an Agents SDK triage agent that *hands off* to the specialist, with the
  SDK's handoff tools (``transfer_to_math``, ``transfer_to_writer``). The planner's reply is parsed
  into tool calls (``<tool_call>`` blocks); a reply that hands off to no one, or to a tool that
  does not exist, is a failed hand-off (success 0). The built-in model and SmolLM2 have no tool
  support in their chat templates, so the env describes the tools in the system prompt
  (``tool_prompt="hermes"``); with a model whose template renders tools (Qwen2.5-Instruct), pass
  ``--env-kwargs '{"tool_prompt": null}'``.

Both are registered with ``transport="http"``: each episode's program gets an ``openai.OpenAI``
client whose ``base_url`` is the episode's own URL on a local endpoint, and builds the framework's
client from it; ``model`` names the agent, so each agent's calls reach its own adapter.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, TypedDict

import marft_envs
from marft_envs.math import grade_answer

sys.path.insert(0, str(Path(__file__).parent))
import program_team
from program_team import CRITIC, PLANNER, SPECIALISTS, helpdesk_tasks

AGENTS = ["planner", "math", "writer", "critic"]


class Ticket(TypedDict):
    request: str
    route: str
    answer: str
    verdict: str


def langgraph_team(task: dict[str, Any], client: Any) -> dict[str, float]:
    """The help desk as a LangGraph graph."""
    from langchain_openai import ChatOpenAI
    from langgraph.graph import END, START, StateGraph

    def llm(agent: str) -> ChatOpenAI:
        return ChatOpenAI(
            model=agent, base_url=str(client.base_url), api_key="marft", max_retries=0
        )

    def planner(state: Ticket) -> dict[str, str]:
        reply = llm("planner").invoke([("system", PLANNER), ("user", state["request"])])
        return {"route": "math" if "math" in str(reply.content).lower() else "writer"}

    def specialist(state: Ticket) -> dict[str, str]:
        prompt = state["request"]
        if state["verdict"]:
            prompt += f"\n\nA reviewer sent your answer back: {state['verdict']}"
        reply = llm(state["route"]).invoke(
            [("system", SPECIALISTS[state["route"]]), ("user", prompt)]
        )
        return {"answer": str(reply.content)}

    def critic(state: Ticket) -> dict[str, str]:
        user = f"Request: {state['request']}\nAnswer: {state['answer']}"
        return {"verdict": str(llm("critic").invoke([("system", CRITIC), ("user", user)]).content)}

    def sent_back(state: Ticket) -> str:
        first_review = sum(client.counts.calls.get(a, 0) for a in ("math", "writer")) == 1
        return "specialist" if first_review and "REVISE" in state["verdict"].upper() else END

    graph = StateGraph(Ticket)
    graph.add_node("planner", planner)
    graph.add_node("specialist", specialist)
    graph.add_node("critic", critic)
    graph.add_edge(START, "planner")
    graph.add_edge("planner", "specialist")
    graph.add_edge("specialist", "critic")
    graph.add_conditional_edges("critic", sent_back)
    start: Ticket = {"request": task["request"], "route": "", "answer": "", "verdict": ""}
    final = graph.compile().invoke(start)
    calls = sum(client.counts.calls.values())
    return {"success": float(grade_answer(final["answer"], task["answer"])), "cost": -0.02 * calls}


async def agents_sdk_team(task: dict[str, Any], client: Any) -> dict[str, float]:
    """The help desk with the OpenAI Agents SDK (chat completions, tracing off: nothing leaves
    the machine)."""
    from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    api = AsyncOpenAI(base_url=str(client.base_url), api_key="marft", max_retries=0)

    def agent(name: str, instructions: str) -> Agent:
        model = OpenAIChatCompletionsModel(model=name, openai_client=api)
        return Agent(name=name, instructions=instructions, model=model)

    route = (await Runner.run(agent("planner", PLANNER), task["request"])).final_output
    specialist = "math" if "math" in str(route).lower() else "writer"
    expert = agent(specialist, SPECIALISTS[specialist])
    answer = str((await Runner.run(expert, task["request"])).final_output)
    review = f"Request: {task['request']}\nAnswer: {answer}"
    verdict = str((await Runner.run(agent("critic", CRITIC), review)).final_output)
    if "REVISE" in verdict.upper():
        retry = f"{task['request']}\n\nA reviewer sent your answer back: {verdict}"
        answer = str((await Runner.run(expert, retry)).final_output)
    calls = sum(client.counts.calls.values())
    return {"success": float(grade_answer(answer, task["answer"])), "cost": -0.02 * calls}


TRIAGE = (
    "You route customer requests. Hand each request to the specialist who can answer it: the math "
    "specialist for a calculation, the writer for anything else."
)


async def agents_sdk_handoff_team(task: dict[str, Any], client: Any) -> dict[str, float]:
    """The help desk with an Agents SDK triage agent that hands off to a specialist."""
    from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
    from agents.exceptions import AgentsException
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    api = AsyncOpenAI(base_url=str(client.base_url), api_key="marft", max_retries=0)

    def model(name: str) -> OpenAIChatCompletionsModel:
        return OpenAIChatCompletionsModel(model=name, openai_client=api)

    math = Agent(
        name="math",
        instructions=SPECIALISTS["math"],
        model=model("math"),
        handoff_description="Computes the answer to a calculation.",
    )
    writer = Agent(
        name="writer",
        instructions=SPECIALISTS["writer"],
        model=model("writer"),
        handoff_description="Answers requests that are not calculations.",
    )
    triage = Agent(
        name="planner", instructions=TRIAGE, model=model("planner"), handoffs=[math, writer]
    )
    try:
        result = await Runner.run(triage, task["request"], max_turns=3)
    except AgentsException:  # a call to a tool that does not exist, or no end in three turns
        return {"success": 0.0, "handoff": 0.0, "cost": -0.02 * sum(client.counts.calls.values())}
    handed_to = result.last_agent.name
    answer = str(result.final_output) if handed_to != "planner" else ""
    if answer:
        review = f"Request: {task['request']}\nAnswer: {answer}"
        critic = Agent(name="critic", instructions=CRITIC, model=model("critic"))
        verdict = str((await Runner.run(critic, review)).final_output)
        if "REVISE" in verdict.upper():
            retry = f"{task['request']}\n\nA reviewer sent your answer back: {verdict}"
            specialist = math if handed_to == "math" else writer
            answer = str((await Runner.run(specialist, retry)).final_output)
    calls = sum(client.counts.calls.values())
    return {
        "success": float(bool(answer) and grade_answer(answer, task["answer"])),
        "handoff": float(handed_to != "planner"),
        "cost": -0.02 * calls,
    }


def calculate_expression(expression: str) -> str:
    """The value of an arithmetic expression (numbers, + - * / ** and brackets), as text."""
    import ast
    import operator

    operations = {
        ast.Add: operator.add,
        ast.Sub: operator.sub,
        ast.Mult: operator.mul,
        ast.Div: operator.truediv,
        ast.Pow: operator.pow,
        ast.USub: operator.neg,
    }

    def value(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in operations:
            if isinstance(node.op, ast.Pow) and abs(value(node.right)) > 64:
                raise ValueError("exponent too large")
            return operations[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in operations:
            return operations[type(node.op)](value(node.operand))
        raise ValueError(f"not arithmetic: {ast.dump(node)[:40]}")

    try:
        return str(value(ast.parse(expression, mode="eval").body))
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError) as err:
        return f"error: {err}"


async def agents_sdk_responses_team(task: dict[str, Any], client: Any) -> dict[str, float]:
    """The hand-off help desk with the Agents SDK in its default configuration: agents name their
    model by the agent's name, and the run's provider is the SDK's own ``OpenAIProvider`` on the
    episode's URL, so every call goes through the Responses API. The math specialist may call
    ``calculate``."""
    from agents import Agent, RunConfig, Runner, function_tool, set_tracing_disabled
    from agents.exceptions import AgentsException
    from agents.models.openai_provider import OpenAIProvider
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    api = AsyncOpenAI(base_url=str(client.base_url), api_key="marft", max_retries=0)
    config = RunConfig(model_provider=OpenAIProvider(openai_client=api))

    @function_tool
    def calculate(expression: str) -> str:
        """Evaluate an arithmetic expression such as (3 + 4) * 2."""
        return calculate_expression(expression)

    math = Agent(
        name="math",
        instructions=SPECIALISTS["math"],
        model="math",
        tools=[calculate],
        handoff_description="Computes the answer to a calculation.",
    )
    writer = Agent(
        name="writer",
        instructions=SPECIALISTS["writer"],
        model="writer",
        handoff_description="Answers requests that are not calculations.",
    )
    triage = Agent(name="planner", instructions=TRIAGE, model="planner", handoffs=[math, writer])
    try:
        result = await Runner.run(triage, task["request"], max_turns=4, run_config=config)
    except AgentsException:  # a tool that does not exist, or no end in four turns
        return {"success": 0.0, "handoff": 0.0, "cost": -0.02 * sum(client.counts.calls.values())}
    handed_to = result.last_agent.name
    answer = str(result.final_output) if handed_to != "planner" else ""
    return {
        "success": float(bool(answer) and grade_answer(answer, task["answer"])),
        "handoff": float(handed_to != "planner"),
        "cost": -0.02 * sum(client.counts.calls.values()),
    }


for env_id, program, framework, extra in (
    ("helpdesk-langgraph-v0", langgraph_team, "LangGraph", {}),
    ("helpdesk-agents-sdk-v0", agents_sdk_team, "OpenAI Agents SDK", {}),
    (
        "helpdesk-handoff-v0",
        agents_sdk_handoff_team,
        "OpenAI Agents SDK and its handoffs",
        {"tool_prompt": "hermes", "reward_weights": {"handoff": 0.0}},
    ),
    (
        "helpdesk-responses-v0",
        agents_sdk_responses_team,
        "OpenAI Agents SDK in its default configuration (the Responses API), a tool and handoffs",
        {"tool_prompt": "hermes", "reward_weights": {"handoff": 0.0}},
    ),
):
    marft_envs.register_program(
        env_id,
        program,
        agents=AGENTS,
        tasks=helpdesk_tasks("train"),
        test_tasks=helpdesk_tasks("test"),
        transport="http",
        description=f"The help desk written with the {framework}, over the local endpoint.",
        **extra,
    )


def main(argv: list[str] | None = None) -> dict:
    return program_team.main(argv, env="helpdesk-langgraph-v0", output_dir="runs/framework_team")


if __name__ == "__main__":
    from marft_algos.cli.main import guarded

    guarded(main, sys.argv[1:], "framework_teams.py")
