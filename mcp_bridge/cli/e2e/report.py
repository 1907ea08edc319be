"""The report of a run: text for people (ending with ``N passed, N failed``) and JUnit XML for CI."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from mcp_bridge.cli.e2e.runner import CaseResult


def describe(result: CaseResult) -> list[str]:
    """The lines that explain one case's outcome (nothing more than a header when it passed)."""
    case = result.case
    if result.passed:
        return [f"PASS  {case.name}"]
    lines = [f"FAIL  {case.name}  ({case.where}, conversation {result.conversation_id})"]
    if result.error is not None:
        lines.append(f"  could not run the case: {result.error}")
        return lines
    failure = result.failure
    assert failure is not None
    step = failure.step
    lines.append(f"  step {step.number} (line {step.line}): {step.text}")
    lines.append(f"    expected: {failure.expected}")
    lines.append(f"    got:      {failure.got}")
    lines.extend(f"    {line}" for line in failure.context)
    return lines


def summary(results: Sequence[CaseResult]) -> str:
    passed = sum(1 for result in results if result.passed)
    return f"{passed} passed, {len(results) - passed} failed"


def text_report(results: Sequence[CaseResult], warnings: Sequence[str] = ()) -> str:
    lines: list[str] = []
    for result in results:
        lines.extend(describe(result))
    lines.append("")
    lines.extend(warnings)
    lines.append(summary(results))
    return "\n".join(lines) + "\n"


def write_junit(results: Sequence[CaseResult], path: Path, suite_name: str = "mcp-bridge e2e") -> None:
    """One <testsuite> per test-case file, one <testcase> per case, <failure>/<error> with the explanation."""
    root = ET.Element("testsuites", name=suite_name)
    by_file: dict[str, list[CaseResult]] = {}
    for result in results:
        by_file.setdefault(str(result.case.file), []).append(result)
    for file_name, file_results in by_file.items():
        suite = ET.SubElement(
            root,
            "testsuite",
            name=file_name,
            tests=str(len(file_results)),
            failures=str(sum(1 for r in file_results if r.failure is not None)),
            errors=str(sum(1 for r in file_results if r.error is not None)),
            time=f"{sum(r.seconds for r in file_results):.3f}",
        )
        for result in file_results:
            case = ET.SubElement(
                suite,
                "testcase",
                classname=file_name,
                name=result.case.name,
                file=file_name,
                line=str(result.case.line),
                time=f"{result.seconds:.3f}",
            )
            if result.passed:
                continue
            body = "\n".join(describe(result)[1:])
            if result.error is not None:
                ET.SubElement(case, "error", message=result.error).text = body
            else:
                assert result.failure is not None
                step = result.failure.step
                failure = result.failure
                message = f"step {step.number}: {step.text}: expected {failure.expected}; got {failure.got}"
                ET.SubElement(case, "failure", message=message).text = body
    root.set("tests", str(len(results)))
    root.set("failures", str(sum(1 for r in results if r.failure is not None)))
    root.set("errors", str(sum(1 for r in results if r.error is not None)))
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
