"""The certificate: each rule passed, failed or not applicable, for one backend; text, Markdown
and JSON."""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from ._rules import ONE_OF_REQUIRED, RULES

__all__ = ["Certificate", "RuleResult", "RuleStatus", "TestRecord", "build_certificate"]


class RuleStatus(str, enum.Enum):
    PASSED = "passed"
    FAILED = "failed"
    NOT_APPLICABLE = "not applicable"
    NOT_RUN = "not run"

    def __str__(self) -> str:
        return self.value


@attrs.frozen(kw_only=True)
class TestRecord:
    """The outcome of one test of the kit."""

    __test__ = False  # not a pytest test class

    nodeid: str
    rules: tuple[str, ...]
    outcome: str
    """``passed``, ``failed`` or ``skipped``."""
    reason: str = ""


@attrs.frozen(kw_only=True)
class RuleResult:
    id: str
    description: str
    status: RuleStatus
    detail: str = ""
    """Why not applicable, or which checks failed."""
    tests: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class Certificate:
    backend: str
    server_version: str
    kit_version: str
    suite: str
    results: tuple[RuleResult, ...]

    def result(self, rule_id: str) -> RuleResult:
        return next(r for r in self.results if r.id == rule_id)

    def status(self, rule_id: str) -> RuleStatus:
        return self.result(rule_id).status

    @property
    def problems(self) -> list[str]:
        """Why the backend is not certified; empty when it is."""
        found = [f"{r.id} failed" for r in self.results if r.status is RuleStatus.FAILED]
        found += [
            f"{r.id} is required and was {r.status}"
            for r in self.results
            if r.id in _REQUIRED and r.status in (RuleStatus.NOT_APPLICABLE, RuleStatus.NOT_RUN)
        ]
        if not any(self.status(i) is RuleStatus.PASSED for i in ONE_OF_REQUIRED):
            found.append(f"one of {' or '.join(ONE_OF_REQUIRED)} must pass")
        return found

    @property
    def certified(self) -> bool:
        return not self.problems

    # -- writers --------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "server_version": self.server_version,
            "kit_version": self.kit_version,
            "suite": self.suite,
            "certified": self.certified,
            "problems": self.problems,
            "rules": [
                {
                    "id": r.id,
                    "description": r.description,
                    "status": r.status.value,
                    "detail": r.detail,
                    "tests": list(r.tests),
                }
                for r in self.results
            ],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Certificate:
        return cls(
            backend=data["backend"],
            server_version=data["server_version"],
            kit_version=data["kit_version"],
            suite=data["suite"],
            results=tuple(
                RuleResult(
                    id=r["id"],
                    description=r["description"],
                    status=RuleStatus(r["status"]),
                    detail=r["detail"],
                    tests=tuple(r["tests"]),
                )
                for r in data["rules"]
            ),
        )

    def verdict(self) -> str:
        if self.certified:
            return "CERTIFIED"
        return "NOT CERTIFIED: " + "; ".join(self.problems)

    def to_text(self) -> str:
        lines = [
            (
                f"backend {self.backend} | server {self.server_version} | "
                f"anarchon-conformance {self.kit_version}"
            ),
            f"suite {self.suite}",
        ]
        for r in self.results:
            detail = f"  ({r.detail})" if r.detail else ""
            lines.append(f"  {r.id:<6} {r.status.value:<15} {r.description}{detail}")
        lines.append(self.verdict())
        return "\n".join(lines)

    def to_markdown(self) -> str:
        lines = [
            f"# anarchon conformance certificate: {self.backend}",
            "",
            f"- backend: `{self.backend}`",
            f"- server version: {self.server_version}",
            f"- kit version: anarchon-conformance {self.kit_version}",
            f"- suite: `{self.suite}`",
            f"- verdict: **{self.verdict()}**",
            "",
            "| rule | status | description | detail |",
            "|---|---|---|---|",
        ]
        for r in self.results:
            detail = r.detail.replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {r.id} | {r.status.value} | {r.description} | {detail} |")
        return "\n".join(lines) + "\n"


_REQUIRED = frozenset(r.id for r in RULES if r.required)


def _short(nodeid: str) -> str:
    return nodeid.rsplit("::", 1)[-1]


def build_certificate(
    *,
    backend: str,
    server_version: str,
    kit_version: str,
    suite: str,
    records: Sequence[TestRecord],
) -> Certificate:
    """Fold test outcomes into one status per rule: failed if any check failed, passed if one
    passed, not applicable if every check was skipped, not run if none was collected."""
    results = []
    for rule in RULES:
        tests = [t for t in records if rule.id in t.rules]
        failed = [t for t in tests if t.outcome == "failed"]
        passed = [t for t in tests if t.outcome == "passed"]
        if failed:
            status, detail = (
                RuleStatus.FAILED,
                "failed: " + ", ".join(_short(t.nodeid) for t in failed),
            )
        elif passed:
            # Only the rule's own checks: a check of PREP that also counts for C1 is skipped
            # because the store prepares nothing, which says nothing about C1.
            skipped = _skips(t for t in tests if t.rules[0] == rule.id)
            status, detail = RuleStatus.PASSED, skipped and f"some checks not applicable: {skipped}"
        elif tests:
            status, detail = RuleStatus.NOT_APPLICABLE, _skips(tests)
        else:
            status, detail = RuleStatus.NOT_RUN, "no check of this rule was collected"
        results.append(
            RuleResult(
                id=rule.id,
                description=rule.description,
                status=status,
                detail=detail,
                tests=tuple(_short(t.nodeid) for t in tests),
            )
        )
    return Certificate(
        backend=backend,
        server_version=server_version,
        kit_version=kit_version,
        suite=suite,
        results=tuple(results),
    )


def _skips(tests: Iterable[TestRecord]) -> str:
    reasons = dict.fromkeys(
        t.reason.removeprefix("Skipped: ").removeprefix("not applicable: ")
        for t in tests
        if t.outcome == "skipped"
    )
    return "; ".join(r for r in reasons if r)
