"""The server's features, one class each, bound to LSP methods in `flowd/server/setup.py`.

| module | feature |
| --- | --- |
| `plans.py` | plan diagnostics (`plan.*`) and resolving `plan` arguments |
| `owned.py` | the `perimeter.ownedByRunningStory` warning on the user's files |
| `perimeter.py` | perimeter and `task.owns` diagnostics from story worktrees; `flow/perimeter` |
| `notifications.py` | the `flow/*` notifications of each run, and `flow/status` |
| `progress.py` | one work-done progress (`$/progress`) per run |
| `commands.py` | `flow.launchEpic`, `flow.cancelEpic`, `flow.resumeEpic`, `flow.validatePlan` |
| `cost.py` | `flow/costReport` |
| `attention.py` | `flow/attention` for stories waiting on a person (pauses, failures) and `cleared` |
| `answers.py` | `flow.answer`: an answer to a pause, through the run's inbox |
| `review.py` | `flow.addRevision`: a review comment becomes a story's revision task |

A feature reads and changes the shared state on `FlowServer` and hears the server's lifecycle
and each run's life through the hooks below (all no-ops by default).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote

from pygls.uris import to_fs_path

if TYPE_CHECKING:
    from pygls.workspace import TextDocument

    from flowd.events.model import Envelope
    from flowd.server.app import FlowServer
    from flowd.server.runs import Tracked
    from flowd.vcs.gitops import Repo


RUNNING = ("active",)  # lane statuses whose worktree an agent is writing in


def open_document(server: FlowServer, uri: str) -> TextDocument | None:
    """The editor's document `uri` while it is open, else None. pygls keys its documents by the
    URI unquoted: looked up as the editor sent it, a file under a folder with a space (`%20`) or
    any escaped character was never found, and its plan got no diagnostics."""
    document: TextDocument | None = server.workspace.text_documents.get(unquote(uri))
    return document


def open_uris(server: FlowServer) -> list[str]:
    """The URIs of the editor's open documents, as the editor sent them (not pygls's keys)."""
    return [document.uri for document in server.workspace.text_documents.values()]


def checkout_path(repo: Repo | None, uri: str) -> str | None:
    """The repository path of a file in the user's checkout (None outside it, or in `.flow/`)."""
    path_text = to_fs_path(uri)
    if repo is None or not path_text:
        return None
    try:
        rel = Path(path_text).resolve().relative_to(repo.root).as_posix()
    except ValueError:
        return None
    return None if rel == "." or rel.startswith(".flow/") else rel


class Feature:
    def __init__(self, server: FlowServer) -> None:
        self.server = server

    async def started(self) -> None:
        """The repository is known and its runs re-attached (before requests are answered)."""

    def run_attached(self, run: Tracked) -> None:
        """A run that is going on was folded: its present state can be shown."""

    def run_event(self, run: Tracked, envelope: Envelope) -> None:
        """One new event of a live run, already folded into `run.view`."""

    def run_ended(self, run: Tracked) -> None:
        """A live run is over (RunEnded, run.json closed, or its process died)."""
