"""The run's write-ahead journal: every paid LLM answer and every commit, on disk before the next step.

`runs/RUN_ID/journal.jsonl` holds one JSON object per line, appended, flushed and fsynced before the
call that wrote it returns. LangGraph's checkpoint only learns of a node's work when the node returns;
the journal knows it the moment it happens, so a resume after a crash can reconcile the two:

* ``llm_answer``: an answer the LLM server gave (paid): tag, request key, text, usage, cost, the backend and
  model that gave it. An
  answer that no checkpointed ledger row claims is *pending*: the re-run node gets it back for free
  when it asks the same request again (`JournaledLLM`), so it is paid once and counted once. What was asked
  decides, not where or when: the key leaves out what differs between two asks of the same question (the
  project's folder, a temporary folder's name, process ids, times, hashes, any number: `request_key`), and a
  pending answer is found wherever it stands among its tag's, after any rollback and any loss of the
  checkpoint's write-ahead log.
* ``llm_reused`` / ``llm_orphaned``: a pending answer served again, or dropped because its node asked something
  else and nothing pending answers it (its spend is then carried by the next answer, so the ledger still
  holds it).
* ``commit``: a workspace commit (sha, parent, node, attempt). A commit that no checkpointed attempt
  names is rolled back on resume; the re-run node makes it again from the same answers.

Each record is a `halt_point` (orchestrator.base.halt), where a test can stop the process to kill it.
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from orchestrator.base.files import append_whole
from orchestrator.base.halt import halt_point
from orchestrator.llm import LLM, Message, Reply, Usage


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._next = max((r.get("seq", 0) for r in self.records()), default=0) + 1

    def append(self, kind: str, **fields: Any) -> dict[str, Any]:
        record = {"seq": self._next, "kind": kind, "time": time.strftime("%Y-%m-%dT%H:%M:%S"), **fields}
        append_whole(self.path, json.dumps(record, ensure_ascii=False, default=str) + "\n", sync=True)
        self._next += 1
        halt_point(kind, str(fields.get("tag") or fields.get("node") or ""))
        return record

    def records(self, kind: str | None = None) -> list[dict[str, Any]]:
        """Every complete record, in order; a line cut short by a crash is skipped."""
        if not self.path.exists():
            return []
        found = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if kind is None or record.get("kind") == kind:
                found.append(record)
        return found

    # ------------------------------------------------------------------ reconciliation

    def answered(self, llm_spec: str) -> dict[str, int]:
        """How many answers each tag got from `llm_spec` in this run: where a replay continues."""
        counts: dict[str, int] = {}
        for record in self.records("llm_answer"):
            if record.get("llm") == llm_spec:
                counts[record["tag"]] = counts.get(record["tag"], 0) + 1
        return counts

    def pending(self, ledger: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
        """Paid answers no checkpointed ledger row claims, per tag, oldest first."""
        claimed = {seq for row in (ledger or {}).values() for seq in row.get("answers") or []}
        queues: dict[str, list[dict[str, Any]]] = {}
        for record in self.records("llm_answer"):
            if record["seq"] not in claimed:
                queues.setdefault(record["tag"], []).append(record)
        return queues

    def pending_spend(self, ledger: dict[str, dict[str, Any]]) -> tuple[int, float]:
        """(tokens, USD) paid for answers that no checkpointed ledger row holds yet."""
        rows = [r for queue in self.pending(ledger).values() for r in queue]
        return (sum(Usage(**r["usage"]).total_tokens for r in rows), sum(r["cost_usd"] for r in rows))

    def answered_by(self, ledger: dict[str, dict[str, Any]]) -> dict[str, dict[str, int]]:
        """Per node, how many of the answers its ledger row holds each backend and model gave
        ({"map_roles": {"openai Qwen/Qwen2.5-Coder-7B-Instruct": 2}})."""
        records = {r["seq"]: r for r in self.records("llm_answer")}
        by_node: dict[str, dict[str, int]] = {}
        for node, row in (ledger or {}).items():
            for seq in row.get("answers") or []:
                record = records.get(seq)
                if record is not None:
                    backend = record.get("backend") or str(record.get("llm", "")).partition(":")[0]
                    label = f"{backend} {record.get('model') or '?'}"
                    counts = by_node.setdefault(node, {})
                    counts[label] = counts.get(label, 0) + 1
        return by_node

    def unclaimed_commits(self, branch: str, claimed_shas: set[str]) -> list[dict[str, Any]]:
        """Commits on `branch` made after the last one a checkpointed attempt names, oldest first."""
        commits = [r for r in self.records("commit") if r.get("branch") == branch]
        rolled = {sha for r in self.records("rollback") for sha in r.get("commits") or []}
        commits = [r for r in commits if r["sha"] not in rolled]
        last = max((i for i, r in enumerate(commits) if r["sha"] in claimed_shas), default=-1)
        return [r for r in commits[last + 1:] if r["sha"] not in claimed_shas]


_VOLATILE = (
    (re.compile(r"(?<![\w.-])" + re.escape(tempfile.gettempdir()) + r"/[^/\s\"']+"), "<tmp>"),  # mkdtemp's names
    (re.compile(r"\b(?=[0-9a-f]*\d)[0-9a-f]{7,64}\b"), "<hex>"),  # shas, addresses
    (re.compile(r"\d+"), "0"),  # process ids, ports, times, seconds, line numbers
)


def request_key(tag: str, messages: list[Message], system: str, max_tokens: int,
                cache_prefix: list[str] | None, root: Path | None = None) -> str:
    """What a request asks, as a key: two asks of the same question get the same key although their evidence
    names another project folder (a copy), another temporary folder, process id, time or number."""
    blob = json.dumps({"tag": tag, "messages": messages, "system": system, "max_tokens": max_tokens,
                       "cache_prefix": cache_prefix or []}, sort_keys=True, ensure_ascii=False, default=str)
    if root is not None:
        for folder in dict.fromkeys((str(root), str(Path(root).resolve()))):
            blob = blob.replace(folder, "<project>")
    for pattern, stand_in in _VOLATILE:
        blob = pattern.sub(stand_in, blob)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:32]


class JournaledLLM:
    """An LLM whose every answer is journaled before it is used, and whose pending answers are reused.

    A pending answer (paid, never claimed by a checkpoint) is served again, at no new cost, when the
    re-run node asks the same thing under the same tag (`request_key`), wherever it stands among the tag's
    pending answers. When none of them answers the request, they are dropped (`llm_orphaned`) and their spend
    rides on the next answer, so the ledger still holds it.
    """

    def __init__(self, inner: LLM, journal: Journal, spec: str,
                 pending: dict[str, list[dict[str, Any]]] | None = None, root: Path | None = None) -> None:
        self.inner, self.journal, self.spec, self.root = inner, journal, spec, root
        self.max_output_tokens = inner.max_output_tokens
        self.pending = {tag: list(queue) for tag, queue in (pending or {}).items()}

    def complete(self, messages: list[Message], *, system: str = "", max_tokens: int = 8192,
                 cache_prefix: list[str] | None = None, tag: str = "") -> Reply:
        key = request_key(tag, messages, system, max_tokens, cache_prefix, self.root)
        queue = self.pending.get(tag) or []
        found = next((record for record in queue if record.get("request") == key), None)
        if found is not None:
            queue.remove(found)
            self.journal.append("llm_reused", tag=tag, answer=found["seq"])
            return _folded(found, [])
        carried = list(queue)
        queue.clear()
        for record in carried:
            self.journal.append("llm_orphaned", tag=tag, answer=record["seq"],
                                reason="the re-run node asked something no pending answer answers")
        reply = self.inner.complete(messages, system=system, max_tokens=max_tokens, cache_prefix=cache_prefix,
                                    tag=tag)
        record = self.journal.append(
            "llm_answer", tag=tag, llm=self.spec, request=key, text=reply.text, usage=asdict(reply.usage),
            cost_usd=reply.cost_usd, backend=reply.backend, model=reply.model, request_id=reply.request_id,
            stop_reason=reply.stop_reason, tool_calls=list(reply.tool_calls), counted=reply.counted)
        return _folded(record, carried)


def _folded(record: dict[str, Any], carried: list[dict[str, Any]]) -> Reply:
    """The reply of `record`, carrying the spend of dropped answers `carried` so the ledger keeps it."""
    usage, cost = Usage(**record["usage"]), record["cost_usd"]
    for old in carried:
        usage, cost = usage + Usage(**old["usage"]), cost + old["cost_usd"]
    return Reply(text=record["text"], usage=usage, cost_usd=cost, model=record.get("model") or "",
                 request_id=record.get("request_id"), stop_reason=record.get("stop_reason"),
                 answers=(*(o["seq"] for o in carried), record["seq"]), backend=record.get("backend") or "",
                 tool_calls=tuple(record.get("tool_calls") or ()), counted=record.get("counted") or "")


def journaled(inner: LLM, journal: Journal, spec: str, ledger: dict[str, dict[str, Any]],
              root: Path | None = None) -> JournaledLLM:
    """`inner` journaled, serving this run's pending answers (those `ledger` does not claim); `root` is the project
    folder, which a request's key leaves out."""
    return JournaledLLM(inner, journal, spec, journal.pending(ledger), root)

