"""The gate's files for CI: JUnit XML (one testcase per gate x candidate x concurrency; a failed check is a
<failure>, an inconclusive one an <error>, or <skipped> when inconclusive results are allowed) and a Markdown
summary for a CI step summary or a pull-request comment, with links to the pages.

Everything in them comes from the server and its users (names, messages): the XML is built by ElementTree (which
escapes) with the characters XML 1.0 cannot hold removed; the Markdown escapes what would make a table, a link or
HTML of a name."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from typing import Any

from .gates import ERROR, FAILED, INCONCLUSIVE, PASSED, Check
from .output import said, verdict_text

_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#+!|~])")
MAX_TEXT = 4000
ICONS = {PASSED: "✅ passed", FAILED: "❌ failed", INCONCLUSIVE: "⚠️ inconclusive", ERROR: "⛔ error"}


def _xml_text(value: Any) -> str:
    return _NOT_XML.sub("\ufffd", str(value))[:MAX_TEXT]


def junit_xml(experiment: dict[str, Any], checks: Sequence[Check], *, page_url: str, allow_inconclusive: bool) -> bytes:
    failures = sum(c.outcome == FAILED for c in checks)
    inconclusive = [c for c in checks if c.outcome in (INCONCLUSIVE, ERROR)]
    skipped = sum(c.outcome == INCONCLUSIVE for c in checks) if allow_inconclusive else 0
    errors = len(inconclusive) - skipped
    root = ET.Element("testsuites", name="specdash gate", tests=str(len(checks)), failures=str(failures),
                      errors=str(errors), skipped=str(skipped))  # fmt: skip
    suite = ET.SubElement(
        root, "testsuite", name=_xml_text(f"specdash experiment {experiment['id']}: {experiment['name']}"),
        tests=str(len(checks)), failures=str(failures), errors=str(errors), skipped=str(skipped),
    )  # fmt: skip
    properties = ET.SubElement(suite, "properties")
    for name, value in (("experiment", experiment["id"]), ("url", page_url), ("status", experiment.get("status"))):
        ET.SubElement(properties, "property", name=name, value=_xml_text(value))
    for check in checks:
        case = ET.SubElement(
            suite, "testcase", classname=_xml_text(f"specdash.{check.gate}"), name=_xml_text(check.name)
        )
        if check.outcome == FAILED:
            element = ET.SubElement(case, "failure", message=_xml_text(check.message), type=check.gate)
            element.text = _xml_text(check.message)
        elif check.outcome == INCONCLUSIVE and allow_inconclusive:
            ET.SubElement(case, "skipped", message=_xml_text(check.message))
        elif check.outcome in (INCONCLUSIVE, ERROR):
            element = ET.SubElement(case, "error", message=_xml_text(check.message), type=check.outcome)
            element.text = _xml_text(check.message)
        else:
            ET.SubElement(case, "system-out").text = _xml_text(check.message)
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


def markdown_escape(value: Any) -> str:
    text = " ".join(str(value).split())  # no newline may end a table row
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)[:MAX_TEXT]


def markdown_summary(
    experiment: dict[str, Any],
    checks: Sequence[Check],
    *,
    code: int,
    link: Callable[[str], str],
) -> str:
    verdict = {0: "passed", 1: "failed", 2: "inconclusive or errored"}[code]
    title = markdown_escape(experiment["name"])
    lines = [
        f"## specdash gate {verdict}: [experiment {experiment['id']} {title}]({_url(link(experiment['url']))})",
        "",
        f"Host {markdown_escape(experiment['host'])}, status {experiment['status']}, baseline "
        f"{markdown_escape(experiment['baseline'])}.",
    ]
    if experiment.get("headline"):
        lines += ["", f"> {markdown_escape(experiment['headline'])}"]
    lines += ["", "| gate | config | concurrency | result | detail |", "|---|---|---|---|---|"]
    for check in checks:
        level = "" if check.concurrency is None else str(check.concurrency)
        lines.append(
            f"| {markdown_escape(check.gate)} | {markdown_escape(check.candidate)} | {level} | "
            f"{ICONS[check.outcome]} | {markdown_escape(check.message)} |"
        )
    rows = experiment.get("comparison") or []
    if rows:
        lines += ["", "| candidate | concurrency | speedup [95% CI] | verdict |", "|---|---|---|---|"]
        for row in rows:
            lines.append(
                f"| {markdown_escape(row['candidate'])} | {row['concurrency']} | {markdown_escape(said(row))} | "
                f"{markdown_escape(verdict_text(row))} |"
            )
    flags = [f for f in experiment.get("flags") or [] if f.get("url")]
    if flags:
        lines += ["", "Flags: " + ", ".join(f"[flag {f['id']}]({_url(link(f['url']))})" for f in flags)]
    runs = [r for r in experiment.get("runs") or [] if r.get("state") == "failed" and r.get("url")]
    if runs:
        lines += ["", "Failed runs: " + ", ".join(f"[run {r['id']}]({_url(link(r['url']))})" for r in runs)]
    return "\n".join(lines) + "\n"


def _url(url: str) -> str:
    """A link target: only http(s), with what would end the Markdown link percent-encoded."""
    if not url.startswith(("http://", "https://")):
        return "#"
    return url.replace("(", "%28").replace(")", "%29").replace(" ", "%20").replace("<", "%3C").replace(">", "%3E")
