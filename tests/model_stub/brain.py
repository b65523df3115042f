"""What the stub model answers: flowd's role recognised from the prompt, and a scripted reply.

Every API is first reduced to a `Conversation` (the last user text, whether the request ends on a
tool result, which tools are offered); `decide` turns that into a `Reply`: text, or one tool call
writing a file into the story's owned paths (coder turns, when the agent offers a write tool).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

# Markers of the prompts flowd sends (flowd/engine/prompts.py, flowd/roster/check.py).
MARKERS: tuple[tuple[str, str], ...] = (
    ("Reply with the single word: ready", "check"),
    ("Plan ONE story as a short list", "planner"),
    ("Review the change below for the task", "reviewer"),
    ("Judge whether the story", "judge"),
    ("You implement ONE story of the epic", "coder"),
    ("is not ready yet. Fix these", "coder"),
    ("changed no file. If the task is already satisfied", "coder"),
    ("You stopped with `BLOCKED_ON:", "coder"),
    ("Your previous reply could not be used", "retry"),
)
WRITE_TOOLS = ("Write", "write_file", "apply_patch", "shell", "shell_command", "exec_command")


@dataclass
class Conversation:
    api: str
    model: str
    last_user_text: str  # the last user message that is text, not a tool result
    ends_on_tool_result: bool
    tools: dict[str, str] = field(default_factory=dict)  # name → "function" | "custom"
    all_user_text: str = ""


@dataclass
class ToolCallReply:
    name: str
    kind: str  # "function" | "custom"
    args: dict[str, Any] | str
    path: str


@dataclass
class Reply:
    role: str
    text: str = ""
    tool: ToolCallReply | None = None


def is_title_request(conv: Conversation) -> bool:
    """claude's session title: flowd's prompt wrapped in `<session>`, asked with no tools."""
    return conv.api == "anthropic" and not conv.tools and conv.last_user_text.lstrip().startswith("<session>")


def role_of(conv: Conversation) -> str:
    """flowd's role of a request, or "side" for one the agent makes on its own."""
    if not conv.last_user_text or is_title_request(conv):
        return "side"
    return recognise(conv.last_user_text)


def recognise(text: str) -> str:
    """flowd's role for a prompt text, or "side" for a request flowd did not send."""
    return _find(text)[0]


def _find(text: str) -> tuple[str, str]:
    """(role, the prompt from its marker on): agents wrap flowd's prompt in their own context."""
    for marker, role in MARKERS:
        at = text.find(marker)
        if at >= 0:
            return role, text[at:]
    return "side", text


def _owned(prompt: str) -> tuple[str | None, list[str]]:
    where = re.search(r"your working directory is (\S+?)\.(?:\s|$)", prompt)
    owned: list[str] = []
    block = re.search(r"Paths you own \(create and change files ONLY here\):\n((?:- .*\n?)+)", prompt)
    if block:
        owned = [line[2:].strip() for line in block.group(1).splitlines() if line.startswith("- ")]
    return (where.group(1) if where else None), owned


def _task_title(prompt: str) -> str:
    found = re.search(r"Your task now: (.+)", prompt)
    return found.group(1).strip() if found else "the task"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or "task"


def target_file(prompt: str) -> tuple[str, str] | None:
    """(absolute path, path relative to the worktree) the coder writes, or None if unknown."""
    worktree, owned = _owned(prompt)
    if worktree is None or not owned:
        return None
    first = owned[0].rstrip("*").rstrip("/")
    is_file = "." in first.rsplit("/", 1)[-1]
    rel = first if is_file else f"{first}/{_slug(_task_title(prompt))}.txt"
    return f"{worktree.rstrip('/')}/{rel}", rel


# A story whose description says `ESCAPE-PROBE <path>`: its coder's one tool call is the agent's
# own shell, writing the owned file and then trying `<path>` (tests/agents_real: confinement).
PROBE = re.compile(r"ESCAPE-PROBE (\S+)")
# A story whose description says `COMMIT-PROBE`: its coder's one tool call is the agent's own
# shell, writing the owned file and committing it with git itself (tests/agents_real: the
# lane's quarantined object store, docs/sandbox.md "The quarantine").
COMMIT_PROBE = "COMMIT-PROBE"
AGENT_COMMIT = "agent's own commit"
SHELL_TOOLS = ("Bash", "run_shell_command", "shell_command", "exec_command", "shell")


def _shell_call(conv: Conversation, script: str, rel: str) -> ToolCallReply | None:
    name = next((t for t in SHELL_TOOLS if t in conv.tools), None)
    if name is None:
        return None
    if name == "exec_command":
        return ToolCallReply(name, "function", {"cmd": script}, rel)
    if name == "shell":
        return ToolCallReply(name, "function", {"command": ["bash", "-lc", script]}, rel)
    return ToolCallReply(name, "function", {"command": script}, rel)


def _tool_call(conv: Conversation, prompt: str) -> ToolCallReply | None:
    target = target_file(prompt)
    if target is None:
        return None
    absolute, rel = target
    content = f"{_task_title(prompt)}\nwritten by the model stub\n"
    probe = PROBE.search(conv.all_user_text)
    if probe is not None:
        # No `$(…)`: gemini's shell tool refuses command substitution.
        write = (
            f"mkdir -p '{rel.rsplit('/', 1)[0] if '/' in rel else '.'}' && printf '%s' '{content}' > '{rel}'"
        )
        return _shell_call(conv, f"{write}; echo escaped > '{probe.group(1)}'; true", rel)
    if COMMIT_PROBE in conv.all_user_text:
        write = (
            f"mkdir -p '{rel.rsplit('/', 1)[0] if '/' in rel else '.'}' && printf '%s' '{content}' > '{rel}'"
        )
        commit = f'git add -A && git -c user.name=agent -c user.email=agent@example.com commit -q -m "{AGENT_COMMIT}"'
        return _shell_call(conv, f"{write} && {commit}", rel)
    if "Write" in conv.tools:
        return ToolCallReply("Write", "function", {"file_path": absolute, "content": content}, rel)
    if "write_file" in conv.tools:
        return ToolCallReply("write_file", "function", {"file_path": absolute, "content": content}, rel)
    if "apply_patch" in conv.tools:
        body = "".join(f"+{line}\n" for line in content.splitlines())
        patch = f"*** Begin Patch\n*** Add File: {rel}\n{body}*** End Patch\n"
        kind = conv.tools["apply_patch"]
        return ToolCallReply("apply_patch", kind, patch if kind == "custom" else {"input": patch}, rel)
    script = f"mkdir -p \"$(dirname '{rel}')\" && printf '%s' '{content}' > '{rel}'"
    if "shell_command" in conv.tools:
        return ToolCallReply("shell_command", "function", {"command": script}, rel)
    if "exec_command" in conv.tools:
        return ToolCallReply("exec_command", "function", {"cmd": script}, rel)
    if "shell" in conv.tools:
        return ToolCallReply("shell", "function", {"command": ["bash", "-lc", script]}, rel)
    return None


def decide(conv: Conversation) -> Reply:
    if is_title_request(conv):
        return Reply("side", json.dumps({"title": "Stub title"}))
    role, prompt = _find(conv.last_user_text)
    if role == "retry":
        role = "coder" if "You implement ONE story" in conv.all_user_text else "planner"
    if role == "check":
        return Reply(role, "ready")
    if role == "planner":
        owned = re.findall(r"^- (.+)$", prompt.split("Request:")[0], re.MULTILINE)
        owns = owned[0] if owned else "."
        title = re.search(r"Story: (.+)", prompt)
        name = title.group(1).strip() if title else "the story"
        task = {"title": f"Implement {name}", "description": f"Write it. Depends on: none Owns: {owns}"}
        return Reply(role, json.dumps({"tasks": [task]}))
    if role in ("reviewer", "judge"):
        return Reply(role, json.dumps({"issues": [], "summary": "looks complete"}))
    if role == "coder":
        if conv.ends_on_tool_result:
            return Reply(role, "Done: the file is written.")
        call = _tool_call(conv, prompt)
        if call is not None:
            return Reply(role, "", call)
        return Reply(role, "Done.")
    # A request the agent makes on its own (a title, a suggestion, routing): a short answer.
    if "model_choice" in conv.all_user_text or "routing" in conv.all_user_text.lower():
        return Reply("side", json.dumps({"reasoning": "simple", "model_choice": "flash"}))
    return Reply("side", "Stub title")
