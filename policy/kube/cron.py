"""CronJob schedules as the API server reads them: the five-field cron line or a descriptor.

kube-apiserver validates ``spec.schedule`` with robfig/cron v3's ``ParseStandard`` (kubernetes pkg/apis/batch/
validation/validation.go ``validateScheduleFormat``; robfig/cron parser.go @v3.0.1): minute, hour, day of month,
month, day of week; each field a comma list of ``*`` (or ``?``), ``N`` or ``N-M``, each optionally ``/STEP``; month
and weekday names (JAN-DEC, SUN-SAT, any case); or one of the descriptors (@yearly ... @hourly, ``@every
DURATION``). From Kubernetes 1.27 a ``TZ=`` or ``CRON_TZ=`` prefix is refused (the timeZone field says it instead).
"""

from __future__ import annotations

import re

_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day of month", 1, 31), ("month", 1, 12), ("day of week", 0, 6))
_MONTHS = {name: i for i, name in enumerate(
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), start=1)}
_WEEKDAYS = {name: i for i, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
_DESCRIPTORS = frozenset({"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"})
# Go's time.ParseDuration, as @every reads its argument (a positive duration).
_DURATION = re.compile(r"^(\d+(\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)((\d+(\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h))*$")


def schedule_problem(schedule: str) -> str | None:
    """Why the API server would refuse ``schedule`` as a CronJob's, or None when it is accepted."""
    text = schedule.strip()
    if not text:
        return "the schedule is empty"
    if text.upper().startswith(("TZ=", "CRON_TZ=")):
        return "a TZ= or CRON_TZ= prefix is refused from Kubernetes 1.27 on (the CronJob's timeZone field says it)"
    if text.startswith("@"):
        if text in _DESCRIPTORS:
            return None
        head, _, rest = text.partition(" ")
        if head == "@every":
            return None if _DURATION.match(rest.strip()) else f"@every needs a duration such as 1h30m, got {rest!r}"
        return f"{head} is not a descriptor (one of {', '.join(sorted(_DESCRIPTORS))}, @every DURATION)"
    fields = text.split()
    if len(fields) != len(_FIELDS):
        return f"expected 5 fields (minute hour day-of-month month day-of-week), found {len(fields)}"
    for value, (name, low, high) in zip(fields, _FIELDS, strict=True):
        names = _MONTHS if name == "month" else _WEEKDAYS if name == "day of week" else {}
        for part in value.split(","):
            problem = _range_problem(part, low, high, names)
            if problem:
                return f"the {name} field {value!r}: {problem}"
    return None


def _range_problem(part: str, low: int, high: int, names: dict[str, int]) -> str | None:
    span, slash, step = part.partition("/")
    if slash and not (step.isdigit() and int(step) > 0):
        return f"the step {step!r} must be a whole number above 0"
    if span in ("*", "?"):
        return None
    first, dash, last = span.partition("-")
    values = []
    for word in (first, last) if dash else (first,):
        number = names.get(word.lower()) if not word.isdigit() else int(word)
        if number is None:
            return f"{word!r} is not a number" + (" or a name" if names else "")
        if not low <= number <= high:
            return f"{number} is outside {low}-{high}"
        values.append(number)
    if len(values) == 2 and values[0] > values[1]:
        return f"the range {span} runs backwards"
    return None
