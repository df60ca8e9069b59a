"""What a notification says, from plain values: the subject and text of an e-mail, the JSON of a Slack-compatible
webhook, the payload of a browser notification. Pure: names typed by users arrive here and leave escaped for
each medium (Slack's `&`, `<`, `>` control characters; e-mail is plain text)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

SUBJECT_PREFIX = "[specdash] "
MAX_SUBJECT = 300
MAX_NAME = 120  # a long user-typed name is cut in a subject line


@dataclass(frozen=True)
class Message:
    event: str
    subject: str
    body: str
    url: str  # absolute: the page the message is about

    def email(self) -> tuple[str, str]:
        return self.subject, f"{self.body}\n\n{self.url}\n"

    def webhook_json(self) -> dict[str, Any]:
        """Slack's incoming-webhook shape (`text` with a `<url|label>` link); the `specdash` part is for other
        receivers and ignored by Slack."""
        text = f"*{slack_escape(self.subject)}*\n{slack_escape(self.body)}\n<{slack_escape(self.url)}|Open in specdash>"
        return {"text": text, "specdash": {"event": self.event, "subject": self.subject, "url": self.url}}

    def browser_json(self) -> dict[str, str]:
        return {"event": self.event, "title": self.subject, "body": self.body, "url": self.url}


def slack_escape(text: str) -> str:
    """Slack reads `<...>` as links and mentions (`<!channel>`); these three are its escapes."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _name(text: str) -> str:
    text = " ".join(text.split())  # no line breaks in a subject (header injection, odd previews)
    return text if len(text) <= MAX_NAME else text[: MAX_NAME - 1] + "…"


def _subject(text: str) -> str:
    return (SUBJECT_PREFIX + text)[:MAX_SUBJECT]


def experiment_ended(
    *,
    event: str,
    name: str,
    owner: str,
    host: str,
    failed_runs: int,
    runs: int,
    verdicts: list[str],
    url: str,
    answers: Sequence[str] = (),
    recommendation: Sequence[str] = (),
) -> Message:
    """`answers`: the experiment page's verdict card sentences, one per candidate, what the message leads with;
    `verdicts`: one line per candidate and concurrency, already worded by the comparison; `recommendation`: the
    bands of the study this experiment's round ended, as the study's page words them (they lead when given)."""
    if failed_runs:
        subject = _subject(f"Experiment {_name(name)} failed: {failed_runs} of {runs} runs failed")
    else:
        subject = _subject(f"Experiment {_name(name)} finished")
    lines = [*recommendation, ""] if recommendation else []
    lines += [*answers, ""] if answers else []
    lines += [f"Experiment: {name}", f"Owner: {owner}", f"Host: {host}", f"Runs: {runs}, failed: {failed_runs}"]
    if verdicts:
        lines += ["", "Verdicts:", *(f"- {v}" for v in verdicts)]
    return Message(event, subject, "\n".join(lines), url)


def flag_raised(*, event: str, summary: str, series: str, host: str, message: str, url: str) -> Message:
    subject = _subject(f"Regression flag on {_name(host)}: {_name(summary)}")
    return Message(event, subject, f"{summary}\nSeries: {series}\nHost: {host}\n\n{message}", url)


def host_dirty(*, event: str, host: str, reason: str, url: str) -> Message:
    subject = _subject(f"Host {_name(host)} is dirty: no run launches there until someone marks it clean")
    return Message(event, subject, f"Host: {host}\nWhy: {reason}", url)
