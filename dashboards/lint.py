#!/usr/bin/env python3
"""Keep the dashboards and alert rules in step with the metric catalogue.

Run by dashboards/check (standard library only):

    python3 dashboards/lint.py names
        Every metric name in the dashboards (strait-*.json), alerts.yml and
        alerts_test.yml is in the catalogue tables of dashboards/README.md; every
        label they match on, group by, template or feed the tests with is one of
        that metric's catalogued labels (or instance, job; le on a histogram's
        buckets); every `label="value"` matcher names a value the catalogue
        spells out (`OK`, `error`, ...); every rule has for, severity, summary and
        description, and a test case where it fires and one where it does not.

    python3 dashboards/lint.py smoke DIR
        Writes DIR/rules.yml (one recording rule per dashboard expression, as
        `generate.py --exprs` prints it, and an alert on its absence) and
        DIR/test.yml (series of every catalogue metric, shaped as the catalogue
        says). `promtool test rules DIR/test.yml` then proves that each
        expression parses and returns data.
"""

import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
README = os.path.join(HERE, "README.md")
DASHBOARDS = ["strait-gateway.json", "strait-mirror.json", "strait-groups.json"]
ALERTS = os.path.join(HERE, "alerts.yml")
ALERTS_TEST = os.path.join(HERE, "alerts_test.yml")

SCRAPE_LABELS = {"instance", "job"}
METRIC = re.compile(r"\bstrait_[a-z0-9_]*[a-z0-9]")
SELECTOR = re.compile(r"\b(strait_[a-z0-9_]+)\s*\{([^}]*)\}")
MATCHER = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
LEGEND = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
TEMPLATE_LABEL = re.compile(r"\$labels\.([A-Za-z_][A-Za-z0-9_]*)")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def catalogue():
    """{name: {"type": ..., "labels": set, "values": set}} from README's metric tables."""
    metrics = {}
    in_metrics = False
    with open(README, encoding="utf-8") as f:
        for line in f:
            if line.startswith("## "):
                in_metrics = line.strip() == "## Metrics"
            if not in_metrics or not line.startswith("| `strait_"):
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|", 3)]
            if len(cells) != 4:
                raise SystemExit(f"README.md: cannot read catalogue row: {line.strip()}")
            name, kind, labels, meaning = cells
            name = name.strip("`")
            metrics[name] = {
                "type": kind,
                "labels": {l.strip() for l in labels.split(",") if l.strip()},
                "values": set(re.findall(r"`([^`]+)`", meaning)),
            }
    if not metrics:
        raise SystemExit("README.md: no metric catalogue found under '## Metrics'")
    return metrics


def resolve(cat, name):
    """Catalogue entry and extra labels for a series name (histogram suffixes included), or None."""
    if name in cat:
        return cat[name], set()
    for suffix in HISTOGRAM_SUFFIXES:
        base = name[: -len(suffix)]
        if name.endswith(suffix) and cat.get(base, {}).get("type") == "histogram":
            return cat[base], {"le"} if suffix == "_bucket" else set()
    return None


class Lint:
    def __init__(self, cat):
        self.cat = cat
        self.errors = []

    def error(self, where, msg):
        self.errors.append(f"{where}: {msg}")

    def allowed_labels(self, names):
        labels = set(SCRAPE_LABELS)
        for n in names:
            r = resolve(self.cat, n)
            if r:
                labels |= r[0]["labels"] | r[1]
        return labels

    def expression(self, where, text, extra_labels=(), values=True):
        """Check metric names, matchers and grouping labels in PromQL (or a series selector)."""
        names = set(METRIC.findall(text))
        if not names:
            self.error(where, f"no strait_ metric in {text!r}")
        for n in sorted(names):
            if resolve(self.cat, n) is None:
                self.error(where, f"metric {n} is not in the catalogue of dashboards/README.md")
        for name, body in SELECTOR.findall(text):
            r = resolve(self.cat, name)
            if r is None:
                continue
            entry, extra = r
            own = entry["labels"] | extra | SCRAPE_LABELS
            for label, op, value in MATCHER.findall(body):
                if label not in own:
                    self.error(where, f"{name} has no label {label!r} (catalogue: {sorted(entry['labels'])})")
                elif (
                    values
                    and op in ("=", "!=")
                    and label not in SCRAPE_LABELS
                    and value not in entry["values"]
                ):
                    self.error(where, f"{name}{{{label}{op}{value!r}}}: the catalogue names no value `{value}`")
        allowed = self.allowed_labels(names) | set(extra_labels)
        for group in GROUPING.findall(text):
            for label in (l.strip() for l in group.split(",")):
                if label and label not in allowed:
                    self.error(where, f"groups by {label!r}, a label none of its metrics has")
        return allowed

    # ---------------------------------------------------------------- dashboards

    def dashboards(self):
        for file in DASHBOARDS:
            path = os.path.join(HERE, file)
            with open(path, encoding="utf-8") as f:
                board = json.load(f)
            for var in board["templating"]["list"]:
                if var["type"] == "query":
                    where = f"{file} variable {var['name']}"
                    allowed = self.expression(where, var["definition"])
                    m = re.fullmatch(r"label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\)", var["definition"])
                    if not m:
                        self.error(where, f"not a label_values(metric, label) query: {var['definition']!r}")
                    elif m.group(2) not in allowed:
                        self.error(where, f"label {m.group(2)!r} is not a label of its metric")
            for panel in board["panels"]:
                ds = panel.get("datasource")
                if ds != {"type": "prometheus", "uid": "${datasource}"}:
                    self.error(f"{file} panel {panel['title']!r}", f"datasource is {ds!r}")
                for t in panel.get("targets", []):
                    where = f"{file} panel {panel['title']!r}"
                    if t.get("datasource") != {"type": "prometheus", "uid": "${datasource}"}:
                        self.error(where, f"target datasource is {t.get('datasource')!r}")
                    allowed = self.expression(where, t["expr"])
                    for label in LEGEND.findall(t.get("legendFormat", "")):
                        if label not in allowed:
                            self.error(where, f"legend uses {{{{{label}}}}}, a label none of its metrics has")

    # ---------------------------------------------------------------- alerts

    def rules(self):
        """[(alert, block text, expr)] from alerts.yml (its own layout: `- alert:` blocks)."""
        with open(ALERTS, encoding="utf-8") as f:
            lines = f.read().splitlines()
        rules = []
        i = 0
        while i < len(lines):
            m = re.match(r"^(\s*)- alert:\s*(\S+)\s*$", lines[i])
            if not m:
                i += 1
                continue
            indent, name = len(m.group(1)), m.group(2)
            block = [lines[i]]
            i += 1
            while i < len(lines) and not re.match(r"^\s*- (alert|record):", lines[i]):
                if lines[i].strip() and len(lines[i]) - len(lines[i].lstrip()) <= indent:
                    break
                block.append(lines[i])
                i += 1
            expr = []
            for j, line in enumerate(block):
                m = re.match(r"^(\s*)expr:\s*(.*)$", line)
                if not m:
                    continue
                if m.group(2) and m.group(2) not in (">-", ">", "|", "|-"):
                    expr.append(m.group(2).strip("'\""))
                else:
                    for more in block[j + 1 :]:
                        if len(more) - len(more.lstrip()) <= len(m.group(1)):
                            break
                        expr.append(more.strip())
            rules.append((name, "\n".join(block), " ".join(expr)))
        if not rules:
            self.error("alerts.yml", "no alert rules found")
        return rules

    def alerts(self):
        rules = self.rules()
        for name, block, expr in rules:
            where = f"alerts.yml {name}"
            allowed = self.expression(where, expr)
            for key in ("for:", "severity:", "summary:", "description:"):
                if key not in block:
                    self.error(where, f"has no {key[:-1]}")
            for n in sorted(set(METRIC.findall(block)) - set(METRIC.findall(expr))):
                if resolve(self.cat, n) is None:
                    self.error(where, f"names metric {n}, not in the catalogue")
            # Labels the alerts keep: those of `by (...)` when the expression aggregates by some,
            # else the metrics' labels less those of `without (...)`.
            kept = set()
            for group in re.findall(r"\bby\s*\(([^)]*)\)", expr):
                kept |= {l.strip() for l in group.split(",") if l.strip()}
            if not kept:
                kept = set(allowed)
                for group in re.findall(r"\bwithout\s*\(([^)]*)\)", expr):
                    kept -= {l.strip() for l in group.split(",")}
            for label in TEMPLATE_LABEL.findall(block):
                if label not in kept:
                    self.error(where, f"annotation uses $labels.{label}, which its expression does not keep")
        return [name for name, _, _ in rules]

    def alert_tests(self, alert_names):
        with open(ALERTS_TEST, encoding="utf-8") as f:
            text = f.read()
        for m in re.finditer(r"-\s*series:\s*['\"]?(.*?)['\"]?\s*$", text, re.M):
            series = m.group(1).replace('\\"', '"')
            self.expression(f"alerts_test.yml series {series}", series, values=False)
        fires, quiet = set(), set()
        for m in re.finditer(r"alertname:\s*(\S+)\s*\n\s*exp_alerts:(.*)", text):
            name, rest = m.group(1), m.group(2).strip()
            if name not in alert_names:
                self.error("alerts_test.yml", f"tests alert {name}, which alerts.yml does not have")
            (quiet if rest == "[]" else fires).add(name)
        for name in alert_names:
            if name not in fires:
                self.error("alerts_test.yml", f"no case where {name} fires")
            if name not in quiet:
                self.error("alerts_test.yml", f"no case where {name} stays quiet (exp_alerts: [])")


def names():
    cat = catalogue()
    lint = Lint(cat)
    lint.dashboards()
    alerts = lint.alerts()
    lint.alert_tests(alerts)
    if lint.errors:
        for e in lint.errors:
            sys.stderr.write(f"dashboards/lint.py: {e}\n")
        sys.stderr.write(
            "dashboards/lint.py: metric names and labels must match the catalogue in dashboards/README.md\n"
        )
        return 1
    print(
        f"names: every metric and label of {len(DASHBOARDS)} dashboards, {len(alerts)} alert rules and their "
        f"tests is in the catalogue ({len(cat)} metrics)"
    )
    return 0


# ---------------------------------------------------------------- smoke test of dashboard expressions


def smoke(out_dir):
    cat = catalogue()
    exprs = [
        json.loads(line)
        for line in subprocess.run(
            [sys.executable, os.path.join(HERE, "generate.py"), "--exprs"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.splitlines()
    ]
    # Values that equality matchers ask for, so that a series exists for each.
    wanted = {}
    for e in exprs:
        for name, body in SELECTOR.findall(e["expr"]):
            for label, op, value in MATCHER.findall(body):
                if op == "=":
                    wanted.setdefault(name, set()).add((label, value))
    series = []
    for name, entry in sorted(cat.items()):
        labels = sorted(entry["labels"])
        variants = [{}] + [{l: v} for l, v in sorted(wanted.get(name, set()) | wanted.get(name + "_bucket", set()))]
        for instance in ("strait-1:9644", "strait-2:9644"):
            for variant in variants:
                base = {"job": "strait", "instance": instance}
                base.update({l: "a" for l in labels})
                base.update(variant)
                if entry["type"] == "histogram":
                    for le in ("0.01", "0.1", "1", "+Inf"):
                        series.append((name + "_bucket", dict(base, le=le), "0+1x80"))
                    series.append((name + "_sum", base, "0+0.5x80"))
                    series.append((name + "_count", base, "0+1x80"))
                elif entry["type"] == "counter":
                    series.append((name, base, "0+1x80"))
                else:
                    series.append((name, base, "1x80"))
    rules = ["groups:", "  - name: dashboard_expressions", "    rules:"]
    cases = []
    for i, e in enumerate(exprs):
        record = f"dashboard:expr_{i}"
        alert = f"DashboardExpressionEmpty_{i}"
        rules += [
            f"      - record: {record}",
            f"        expr: {json.dumps(e['expr'])}",
            f"      - alert: {alert}",
            f"        expr: absent({record})",
            f"        labels: {{dashboard: {json.dumps(e['dashboard'])}, panel: {json.dumps(e['panel'])}}}",
        ]
        cases += [f"      - eval_time: 20m", f"        alertname: {alert}", "        exp_alerts: []"]
    test = ["rule_files:", "  - rules.yml", "evaluation_interval: 15s", "tests:", "  - interval: 15s", "    input_series:"]
    for name, labels, values in series:
        sel = name + "{" + ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items())) + "}"
        test += [f"      - series: {json.dumps(sel)}", f"        values: {json.dumps(values)}"]
    test += ["    alert_rule_test:"] + cases
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "rules.yml"), "w", encoding="utf-8") as f:
        f.write("\n".join(rules) + "\n")
    with open(os.path.join(out_dir, "test.yml"), "w", encoding="utf-8") as f:
        f.write("\n".join(test) + "\n")
    counts = {}
    for e in exprs:
        counts[e["dashboard"]] = counts.get(e["dashboard"], 0) + 1
    print("expressions: " + ", ".join(f"{d} {n}" for d, n in counts.items()))
    return 0


def main(argv):
    if argv == ["names"]:
        return names()
    if len(argv) == 2 and argv[0] == "smoke":
        return smoke(argv[1])
    sys.stderr.write("usage: lint.py names | lint.py smoke DIR\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
