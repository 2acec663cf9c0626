#!/usr/bin/env python3
"""Write Strait's Grafana dashboards: strait-gateway.json, strait-mirror.json and strait-groups.json.

Standard library only; no network. The JSON files sit next to this script and
are committed; regenerate them after changing a panel here:

    python3 dashboards/generate.py           # write the files
    python3 dashboards/generate.py --check   # exit 1 if the committed files differ
    python3 dashboards/generate.py --exprs   # every PromQL expression, one JSON object a line

`--exprs` substitutes the template variables so that each expression runs as
is against a real Prometheus: `$mirror`, `$topic`, `$cluster`, `$group`, `$api` become
`.*` (every matcher on them is a regex match `=~`), `$__rate_interval` becomes
`1m` and `$__range` becomes `1h`.

Metric names must be the ones of the catalogue in dashboards/README.md
(dashboards/check verifies it).
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DS = {"type": "prometheus", "uid": "${datasource}"}

# Substitutions for --exprs, in order (longer names first).
EXPR_SUBSTITUTIONS = [
    ("$__rate_interval", "1m"),
    ("$__range", "1h"),
    ("$mirror", ".*"),
    ("$topic", ".*"),
    ("$cluster", ".*"),
    ("$group", ".*"),
    ("$api", ".*"),
]

RI = "$__rate_interval"


# ---------------------------------------------------------------- building blocks


def target(expr, legend="", instant=False, table=False):
    t = {"datasource": DS, "editorMode": "code", "expr": expr, "legendFormat": legend or "__auto"}
    if table:
        t["format"] = "table"
    t["instant"] = instant
    t["range"] = not instant
    return t


def timeseries(title, description, unit, targets, stack=False, min_zero=True, thresholds=None, max_value=None):
    defaults = {
        "unit": unit,
        "color": {"mode": "palette-classic"},
        "custom": {
            "drawStyle": "line",
            "lineInterpolation": "linear",
            "lineWidth": 1,
            "fillOpacity": 10 if not stack else 40,
            "gradientMode": "none",
            "showPoints": "never",
            "pointSize": 4,
            "spanNulls": False,
            "axisPlacement": "auto",
            "axisLabel": "",
            "stacking": {"mode": "normal" if stack else "none", "group": "A"},
            "thresholdsStyle": {"mode": "line" if thresholds else "off"},
        },
        "thresholds": thresholds
        or {"mode": "absolute", "steps": [{"color": "green", "value": None}]},
    }
    if min_zero:
        defaults["min"] = 0
    if max_value is not None:
        defaults["max"] = max_value
    return {
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DS,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {
            "legend": {
                "displayMode": "table",
                "placement": "bottom",
                "showLegend": True,
                "calcs": ["mean", "max", "lastNotNull"],
            },
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
        "targets": targets,
    }


def stat(title, description, unit, targets, mappings=None, thresholds=None, color_mode="background"):
    return {
        "type": "stat",
        "title": title,
        "description": description,
        "datasource": DS,
        "fieldConfig": {
            "defaults": {
                "unit": unit,
                "mappings": mappings or [],
                "thresholds": thresholds
                or {"mode": "absolute", "steps": [{"color": "green", "value": None}]},
                "color": {"mode": "thresholds"},
            },
            "overrides": [],
        },
        "options": {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "orientation": "auto",
            "textMode": "value_and_name",
            "colorMode": color_mode,
            "graphMode": "none",
            "justifyMode": "auto",
            "wideLayout": True,
        },
        "targets": targets,
    }


def table(title, description, targets, hide=("Time", "Value"), rename=None, unit="short"):
    return {
        "type": "table",
        "title": title,
        "description": description,
        "datasource": DS,
        "fieldConfig": {
            "defaults": {
                "unit": unit,
                "custom": {"align": "auto", "filterable": True},
                "thresholds": {"mode": "absolute", "steps": [{"color": "green", "value": None}]},
            },
            "overrides": [],
        },
        "options": {"showHeader": True, "cellHeight": "sm", "footer": {"show": False}},
        "transformations": [
            {
                "id": "organize",
                "options": {
                    "excludeByName": {name: True for name in hide},
                    "renameByName": rename or {},
                },
            }
        ],
        "targets": targets,
    }


def value_map(pairs):
    """pairs: [(value, text, color)] -> one Grafana value mapping."""
    return [
        {
            "type": "value",
            "options": {
                str(value): {"text": text, "color": color, "index": i}
                for i, (value, text, color) in enumerate(pairs)
            },
        }
    ]


def steps(*pairs):
    """pairs: (None, "green"), (0.1, "red")... -> absolute thresholds."""
    return {"mode": "absolute", "steps": [{"color": c, "value": v} for v, c in pairs]}


def rate(metric, matchers="", window=RI):
    sel = metric + ("{" + matchers + "}" if matchers else "")
    return f"rate({sel}[{window}])"


def quantile(q, metric, by, matchers=""):
    return f"histogram_quantile({q}, sum by ({', '.join(by + ['le'])}) ({rate(metric + '_bucket', matchers)}))"


def p50_p99(metric, by, matchers):
    """Two targets, the median and the 99th percentile of a histogram, by one label."""
    return [
        target(quantile(q, metric, [by], matchers), f"{name} {{{{{by}}}}}")
        for q, name in ((0.5, "p50"), (0.99, "p99"))
    ]


def layout(rows):
    """rows: [(row title, [[(panel, width, height)...] lines...])] -> panels with gridPos and ids."""
    panels = []
    pid = 1
    y = 0
    for row_title, lines in rows:
        panels.append(
            {
                "type": "row",
                "title": row_title,
                "id": pid,
                "collapsed": False,
                "datasource": DS,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "panels": [],
            }
        )
        pid += 1
        y += 1
        for line in lines:
            x = 0
            height = 0
            for panel, w, h in line:
                panel["id"] = pid
                panel["gridPos"] = {"h": h, "w": w, "x": x, "y": y}
                pid += 1
                x += w
                height = max(height, h)
                panels.append(panel)
            if x > 24:
                raise SystemExit(f"row {row_title!r}: panels {x} wide, more than 24")
            y += height
    return panels


def datasource_variable():
    return {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "current": {"selected": False, "text": "Prometheus", "value": "${DS_PROMETHEUS}"},
        "hide": 0,
        "includeAll": False,
        "multi": False,
        "options": [],
        "refresh": 1,
        "regex": "",
        "skipUrlSync": False,
    }


def query_variable(name, label, query):
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DS,
        "definition": query,
        "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery", "qryType": 1},
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "hide": 0,
        "includeAll": True,
        "allValue": ".*",
        "multi": True,
        "options": [],
        "refresh": 2,
        "regex": "",
        "skipUrlSync": False,
        "sort": 1,
    }


def dashboard(uid, title, description, variables, panels):
    return {
        "__inputs": [
            {
                "name": "DS_PROMETHEUS",
                "label": "Prometheus",
                "description": "the Prometheus that scrapes Strait's admin listener (/metrics)",
                "type": "datasource",
                "pluginId": "prometheus",
                "pluginName": "Prometheus",
            }
        ],
        "__elements": {},
        "__requires": [
            {"type": "grafana", "id": "grafana", "name": "Grafana", "version": "10.4.0"},
            {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"},
            {"type": "panel", "id": "timeseries", "name": "Time series", "version": ""},
            {"type": "panel", "id": "stat", "name": "Stat", "version": ""},
            {"type": "panel", "id": "table", "name": "Table", "version": ""},
        ],
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                }
            ]
        },
        "description": description,
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "id": None,
        "links": [
            {
                "title": "Strait",
                "type": "dashboards",
                "tags": ["strait"],
                "asDropdown": False,
                "includeVars": False,
                "keepTime": True,
                "icon": "external link",
                "targetBlank": False,
                "tooltip": "",
                "url": "",
            }
        ],
        "panels": panels,
        "refresh": "30s",
        "schemaVersion": 39,
        "tags": ["strait", "kafka"],
        "templating": {"list": [datasource_variable()] + variables},
        "time": {"from": "now-3h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "title": title,
        "uid": uid,
        "version": 1,
        "weekStart": "",
    }


# ---------------------------------------------------------------- gateway


def gateway():
    api = 'api=~"$api"'
    cl = 'cluster=~"$cluster"'
    cl_api = f"{cl}, {api}"
    up_map = value_map([(0, "DOWN", "red"), (1, "UP", "green")])

    requests_all = f"sum by (api) ({rate('strait_requests_total', api)})"
    api_err = api + ', outcome="error"'
    requests_err = f"sum by (api) ({rate('strait_requests_total', api_err)})"

    rows = [
        (
            "Clients",
            [
                [
                    (
                        timeseries(
                            "Active connections",
                            "Client connections open now, per Strait instance (strait_connections_active).",
                            "short",
                            [target("sum by (instance) (strait_connections_active)", "{{instance}}")],
                        ),
                        8,
                        8,
                    ),
                    (
                        timeseries(
                            "Connections accepted and closed by cause",
                            "Connections accepted per second, and closed per second by cause: client, idle, "
                            "timeout, protocol, io, slow_client, shutdown.",
                            "short",
                            [
                                target(f"sum({rate('strait_connections_accepted_total')})", "accepted"),
                                target(
                                    f"sum by (cause) ({rate('strait_connections_closed_total')})",
                                    "closed: {{cause}}",
                                ),
                            ],
                        ),
                        8,
                        8,
                    ),
                    (
                        timeseries(
                            "Client bytes in / out",
                            "Bytes of client request frames received and response frames sent, per second.",
                            "Bps",
                            [
                                target(
                                    f"sum by (direction) ({rate('strait_client_bytes_total')})",
                                    "{{direction}}",
                                )
                            ],
                        ),
                        8,
                        8,
                    ),
                ]
            ],
        ),
        (
            "Requests",
            [
                [
                    (
                        timeseries(
                            "Request rate by API and outcome",
                            "Requests answered per second; outcome error when the answer carries an error code "
                            "anywhere (a partition, a topic, a group).",
                            "reqps",
                            [
                                target(
                                    f"sum by (api, outcome) ({rate('strait_requests_total', api)})",
                                    "{{api}} {{outcome}}",
                                )
                            ],
                        ),
                        8,
                        8,
                    ),
                    (
                        timeseries(
                            "Error ratio by API",
                            "Share of answers carrying an error code, per API. The alert "
                            "StraitRequestErrorRateHigh fires above 5% for 10 minutes.",
                            "percentunit",
                            [
                                target(
                                    f"({requests_err} or {requests_all} * 0) / {requests_all}",
                                    "{{api}}",
                                )
                            ],
                            thresholds=steps((None, "green"), (0.05, "red")),
                            max_value=1,
                        ),
                        8,
                        8,
                    ),
                    (
                        timeseries(
                            "Request errors by error name",
                            "Error codes in answers per second (one per partition, topic or group carrying "
                            "one), by API and Kafka error name.",
                            "short",
                            [
                                target(
                                    f"sum by (api, error) ({rate('strait_request_errors_total', api)})",
                                    "{{api}} {{error}}",
                                )
                            ],
                        ),
                        8,
                        8,
                    ),
                ]
            ],
        ),
        (
            "Latency: Strait, upstream, local broker",
            [
                [
                    (
                        timeseries(
                            "Request latency p50 / p99 by API",
                            "From a request read whole until its answer is ready to write: all the time in "
                            "Strait, upstream time included. Compare with the upstream p99 beside it.",
                            "s",
                            p50_p99("strait_request_duration_seconds", "api", api),
                        ),
                        8,
                        9,
                    ),
                    (
                        timeseries(
                            "Upstream latency p99 by cluster and API",
                            "From handing a request to its upstream connection until its answer arrived "
                            "(router and mirror requests).",
                            "s",
                            [
                                target(
                                    quantile(
                                        0.99,
                                        "strait_upstream_request_duration_seconds",
                                        ["cluster", "api"],
                                        cl_api,
                                    ),
                                    "p99 {{cluster}} {{api}}",
                                )
                            ],
                        ),
                        8,
                        9,
                    ),
                    (
                        timeseries(
                            "Local broker latency p99 by API",
                            "The local broker's part of a request: local topics and Strait's group coordinator.",
                            "s",
                            [
                                target(
                                    quantile(0.99, "strait_local_request_duration_seconds", ["api"], api),
                                    "p99 {{api}}",
                                )
                            ],
                        ),
                        8,
                        9,
                    ),
                ]
            ],
        ),
        (
            "Upstream clusters",
            [
                [
                    (
                        stat(
                            "Upstream up",
                            "1 when the cluster's metadata last loaded, 0 when the last attempt failed; the "
                            "lowest over Strait instances. StraitUpstreamDown fires after 2 minutes down.",
                            "short",
                            [target(f"min by (cluster) (strait_upstream_up{{{cl}}})", "{{cluster}}")],
                            mappings=up_map,
                            thresholds=steps((None, "red"), (1, "green")),
                        ),
                        6,
                        8,
                    ),
                    (
                        timeseries(
                            "Upstream connections",
                            "Connections open to each cluster's brokers.",
                            "short",
                            [
                                target(
                                    f"sum by (cluster) (strait_upstream_connections{{{cl}}})",
                                    "{{cluster}}",
                                )
                            ],
                        ),
                        6,
                        8,
                    ),
                    (
                        timeseries(
                            "Upstream bytes by cluster and direction",
                            "Request bytes sent to and answer bytes received from each cluster, per second.",
                            "Bps",
                            [
                                target(
                                    f"sum by (cluster, direction) ({rate('strait_upstream_bytes_total', cl)})",
                                    "{{cluster}} {{direction}}",
                                )
                            ],
                        ),
                        6,
                        8,
                    ),
                    (
                        timeseries(
                            "Upstream requests by cluster and outcome",
                            "Requests sent per second; error means not answered (connection failed, timed "
                            "out, malformed answer).",
                            "reqps",
                            [
                                target(
                                    f"sum by (cluster, outcome) ({rate('strait_upstream_requests_total', cl_api)})",
                                    "{{cluster}} {{outcome}}",
                                )
                            ],
                        ),
                        6,
                        8,
                    ),
                ],
                [
                    (
                        timeseries(
                            "Metadata refreshes by outcome",
                            "Metadata loads per second, ok or error, per cluster.",
                            "short",
                            [
                                target(
                                    f"sum by (cluster, outcome) "
                                    f"({rate('strait_upstream_metadata_refreshes_total', cl)})",
                                    "{{cluster}} {{outcome}}",
                                )
                            ],
                        ),
                        12,
                        8,
                    ),
                    (
                        timeseries(
                            "Metadata age",
                            "Seconds since each cluster's metadata last loaded (the oldest over Strait "
                            "instances).",
                            "s",
                            [
                                target(
                                    f"max by (cluster) (strait_upstream_metadata_age_seconds{{{cl}}})",
                                    "{{cluster}}",
                                )
                            ],
                        ),
                        12,
                        8,
                    ),
                ],
            ],
        ),
        (
            "Local spool and groups",
            [
                [
                    (
                        timeseries(
                            "Spool size by topic",
                            "Bytes of each local topic's segments on disk.",
                            "bytes",
                            [target("sum by (topic) (strait_spool_size_bytes)", "{{topic}}")],
                            stack=True,
                        ),
                        8,
                        8,
                    ),
                    (
                        timeseries(
                            "Spool segments by topic",
                            "Segment files of each local topic.",
                            "short",
                            [target("sum by (topic) (strait_spool_segments)", "{{topic}}")],
                            stack=True,
                        ),
                        8,
                        8,
                    ),
                    (
                        timeseries(
                            "Spool disk free",
                            "Free share of the file system of data_dir, per Strait instance. "
                            "StraitSpoolDiskNearlyFull fires below 10% for 5 minutes.",
                            "percentunit",
                            [
                                target(
                                    "strait_spool_disk_free_bytes / strait_spool_disk_size_bytes",
                                    "{{instance}}",
                                )
                            ],
                            thresholds=steps((None, "red"), (0.1, "green")),
                            max_value=1,
                        ),
                        8,
                        8,
                    ),
                ],
                [
                    (
                        timeseries(
                            "fsync latency p99",
                            "One fsync (fdatasync, or syncfs for many partitions at once), per Strait instance.",
                            "s",
                            [
                                target(
                                    quantile(0.99, "strait_spool_fsync_duration_seconds", ["instance"]),
                                    "p99 {{instance}}",
                                )
                            ],
                        ),
                        8,
                        8,
                    ),
                    (
                        timeseries(
                            "Group members",
                            "Members of each group Strait's coordinator holds.",
                            "short",
                            [target('sum by (group) (strait_group_members{cluster="local"})', "{{group}}")],
                        ),
                        8,
                        8,
                    ),
                    (
                        timeseries(
                            "Group rebalances",
                            "Rebalances completed (generations begun) per second by Strait's coordinator.",
                            "short",
                            [target(f"sum by (instance) ({rate('strait_group_rebalances_total')})", "{{instance}}")],
                        ),
                        5,
                        8,
                    ),
                    (
                        table(
                            "Build",
                            "The version each Strait instance runs.",
                            [
                                target(
                                    "sum by (instance, version) (strait_build_info)",
                                    "",
                                    instant=True,
                                    table=True,
                                )
                            ],
                        ),
                        3,
                        8,
                    ),
                ],
            ],
        ),
    ]
    return dashboard(
        "strait-gateway",
        "Strait gateway",
        "Strait's Kafka gateway: client connections and requests, upstream clusters, local spool and "
        "groups. Metric catalogue: dashboards/README.md.",
        [
            query_variable("cluster", "Upstream cluster", "label_values(strait_upstream_up, cluster)"),
            query_variable("api", "API", "label_values(strait_requests_total, api)"),
        ],
        layout(rows),
    )


# ---------------------------------------------------------------- mirror

STATUS_ORDER = [("OK", "green"), ("WARN", "yellow"), ("STALL", "orange"), ("STOP", "purple"), ("ERR", "red")]


def status_number(metric, matchers):
    """An evaluated status series as a number, OK 0 ... ERR 4 (STATUS_ORDER)."""
    return " or ".join(
        f'({metric}{{{matchers}, status="{name}"}} == 1) * {i}' for i, (name, _) in enumerate(STATUS_ORDER)
    )


def mirror():
    mt = 'mirror=~"$mirror", topic=~"$topic"'
    m = 'mirror=~"$mirror"'
    status_map = value_map([(i, name, color) for i, (name, color) in enumerate(STATUS_ORDER)])
    status_steps = steps(*[(None if i == 0 else i, color) for i, (_, color) in enumerate(STATUS_ORDER)])
    # Worst status of each mirror as a number (OK 0 ... ERR 4): the mirror's status is its worst
    # partition's (README, Mirror status).
    worst = status_number("strait_mirror_status", mt)
    part_legend = "{{mirror}} {{topic}}/{{partition}}"

    rows = [
        (
            "Status",
            [
                [
                    (
                        stat(
                            "Mirror status",
                            "Each mirror's evaluated status, its worst partition's: OK, WARN (falling "
                            "behind), STALL (position not moving with lag), STOP (stopped, or commits "
                            "stopped), ERR (errors within the last minute). Rules: dashboards/README.md, "
                            "Mirror status; details per partition: /api/v1/mirrors.",
                            "short",
                            [target(f"max by (mirror) ({worst})", "{{mirror}}")],
                            mappings=status_map,
                            thresholds=status_steps,
                        ),
                        12,
                        6,
                    ),
                    (
                        stat(
                            "Partitions by status",
                            "How many mirror partitions have each evaluated status now.",
                            "short",
                            [
                                target(
                                    f"count by (status) (strait_mirror_status{{{mt}}} == 1)",
                                    "{{status}}",
                                )
                            ],
                            color_mode="value",
                        ),
                        6,
                        6,
                    ),
                    (
                        stat(
                            "Lost records in range",
                            "Source records deleted by retention before they were mirrored, over the "
                            "dashboard's time range. Any is a loss: StraitMirrorLostRecords fires at once.",
                            "short",
                            [
                                target(
                                    f"sum by (mirror) (increase(strait_mirror_lost_records_total{{{mt}}}[$__range]))",
                                    "{{mirror}}",
                                    instant=True,
                                )
                            ],
                            thresholds=steps((None, "green"), (1, "red")),
                        ),
                        6,
                        6,
                    ),
                ]
            ],
        ),
        (
            "Lag",
            [
                [
                    (
                        timeseries(
                            "Lag (records)",
                            "Source high watermark minus the next offset to mirror, per partition.",
                            "short",
                            [
                                target(
                                    f"max by (mirror, topic, partition) (strait_mirror_lag_records{{{mt}}})",
                                    part_legend,
                                )
                            ],
                        ),
                        12,
                        9,
                    ),
                    (
                        timeseries(
                            "Lag (seconds)",
                            "Age of the oldest source record not yet on the target, per partition; 0 when "
                            "caught up. StraitMirrorLagHigh fires above 300 s for 5 minutes.",
                            "s",
                            [
                                target(
                                    f"max by (mirror, topic, partition) (strait_mirror_lag_seconds{{{mt}}})",
                                    part_legend,
                                )
                            ],
                            thresholds=steps((None, "green"), (300, "red")),
                        ),
                        12,
                        9,
                    ),
                ],
                [
                    (
                        timeseries(
                            "Commit age",
                            "Seconds since each partition's position was last committed to the source.",
                            "s",
                            [
                                target(
                                    f"max by (mirror, topic, partition) (strait_mirror_commit_age_seconds{{{mt}}})",
                                    part_legend,
                                )
                            ],
                        ),
                        12,
                        8,
                    ),
                    (
                        timeseries(
                            "Partition states",
                            "Mirror partitions in each state (starting, running, retrying, stopped), per "
                            "mirror.",
                            "short",
                            [
                                target(
                                    f"count by (mirror, status) (strait_mirror_partition_status{{{mt}}} == 1)",
                                    "{{mirror}} {{status}}",
                                )
                            ],
                            stack=True,
                        ),
                        12,
                        8,
                    ),
                ],
            ],
        ),
        (
            "Throughput",
            [
                [
                    (
                        timeseries(
                            "Records mirrored per second",
                            "Records written to the target per second, per mirror and topic.",
                            "short",
                            [
                                target(
                                    f"sum by (mirror, topic) ({rate('strait_mirror_records_total', mt)})",
                                    "{{mirror}} {{topic}}",
                                )
                            ],
                            stack=True,
                        ),
                        8,
                        8,
                    ),
                    (
                        timeseries(
                            "Bytes mirrored and fetched per second",
                            "Record batch bytes written to the target per second, per mirror and topic, and "
                            "record bytes fetched from the source (what crossed the link: more than written "
                            "where fetches overlap, as staggered_polls does for caught-up partitions).",
                            "Bps",
                            [
                                target(
                                    f"sum by (mirror, topic) ({rate('strait_mirror_bytes_total', mt)})",
                                    "{{mirror}} {{topic}} written",
                                ),
                                target(
                                    f"sum by (mirror, topic) ({rate('strait_mirror_fetched_bytes_total', mt)})",
                                    "{{mirror}} {{topic}} fetched",
                                ),
                            ],
                        ),
                        8,
                        8,
                    ),
                    (
                        timeseries(
                            "Batches passed through vs re-encoded",
                            "Batches written per second: passed_through (the source's bytes as they were) "
                            "or reencoded.",
                            "short",
                            [
                                target(
                                    f"sum by (mirror, how) ({rate('strait_mirror_batches_total', mt)})",
                                    "{{mirror}} {{how}}",
                                )
                            ],
                            stack=True,
                        ),
                        8,
                        8,
                    ),
                ]
            ],
        ),
        (
            "Latency",
            [
                [
                    (
                        timeseries(
                            "Replication latency p50 / p99",
                            "Target acknowledgement time minus the timestamp of each batch's first record, "
                            "per mirror.",
                            "s",
                            p50_p99("strait_mirror_replication_latency_seconds", "mirror", m),
                        ),
                        12,
                        8,
                    ),
                    (
                        timeseries(
                            "Produce latency p99",
                            "From sending a produce to the target until its acknowledgement, per mirror.",
                            "s",
                            [
                                target(
                                    quantile(0.99, "strait_mirror_produce_latency_seconds", ["mirror"], m),
                                    "p99 {{mirror}}",
                                )
                            ],
                        ),
                        12,
                        8,
                    ),
                ]
            ],
        ),
        (
            "Problems",
            [
                [
                    (
                        timeseries(
                            "Lost records",
                            "Source records deleted by retention before they were mirrored (increase per "
                            "interval), per partition.",
                            "short",
                            [
                                target(
                                    f"sum by (mirror, topic, partition) "
                                    f"(increase(strait_mirror_lost_records_total{{{mt}}}[{RI}]))",
                                    part_legend,
                                )
                            ],
                            thresholds=steps((None, "green"), (1, "red")),
                        ),
                        8,
                        8,
                    ),
                    (
                        timeseries(
                            "Errors by kind",
                            "Mirror errors per second by kind: source, target, source_data, producer_state, "
                            "diverged, lost_records.",
                            "short",
                            [
                                target(
                                    f"sum by (mirror, kind) ({rate('strait_mirror_errors_total', m)})",
                                    "{{mirror}} {{kind}}",
                                )
                            ],
                        ),
                        8,
                        8,
                    ),
                    (
                        table(
                            "Every partition's state",
                            "Each mirror partition's state now (starting, running, retrying, stopped); "
                            "the reason and last error are in /api/v1/mirrors.",
                            [
                                target(
                                    f'max by (mirror, topic, partition, status) '
                                    f'(strait_mirror_partition_status{{{mt}}} == 1)',
                                    "",
                                    instant=True,
                                    table=True,
                                )
                            ],
                            rename={"status": "state"},
                        ),
                        8,
                        8,
                    ),
                ]
            ],
        ),
    ]
    return dashboard(
        "strait-mirror",
        "Strait mirrors",
        "Strait's cross-datacenter mirrors: status, lag, throughput, latency, lost records and errors. "
        "Metric catalogue and status rules: dashboards/README.md.",
        [
            query_variable("mirror", "Mirror", "label_values(strait_mirror_lag_records, mirror)"),
            query_variable("topic", "Topic", 'label_values(strait_mirror_lag_records{mirror=~"$mirror"}, topic)'),
        ],
        layout(rows),
    )


def groups():
    cg = 'cluster=~"$cluster", group=~"$group"'
    status_map = value_map([(i, name, color) for i, (name, color) in enumerate(STATUS_ORDER)])
    status_steps = steps(*[(None if i == 0 else i, color) for i, (_, color) in enumerate(STATUS_ORDER)])
    # Each group's status as a number (OK 0 ... ERR 4).
    worst = status_number("strait_group_status", cg)
    polls_failed = rate("strait_lag_poll_errors_total", 'cluster=~"$cluster"')
    group_legend = "{{cluster}} {{group}}"
    part_legend = "{{cluster}} {{group}} {{topic}}/{{partition}}"
    rows = [
        (
            "Status",
            [
                [
                    (
                        stat(
                            "Group status",
                            "Each consumer group's evaluated status, its worst partition's, judged like a "
                            "mirror's: OK, WARN (falling behind), STALL (committed offset not moving with "
                            "lag), STOP (behind with no members), ERR (offsets not read, or an offset beyond "
                            "the partition's end). Rules: dashboards/README.md; details: /api/v1/groups.",
                            "short",
                            [target(f"max by (cluster, group) ({worst})", group_legend)],
                            mappings=status_map,
                            thresholds=status_steps,
                        ),
                        12,
                        6,
                    ),
                    (
                        stat(
                            "Groups by status",
                            "How many watched groups have each evaluated status now.",
                            "short",
                            [target(f"count by (status) (strait_group_status{{{cg}}} == 1)", "{{status}}")],
                            color_mode="value",
                        ),
                        6,
                        6,
                    ),
                    (
                        stat(
                            "Groups left out",
                            "Watched groups beyond lag.max_groups per cluster, not read (the log names them).",
                            "short",
                            [target('max by (cluster) (strait_lag_groups_skipped{cluster=~"$cluster"})', "{{cluster}}")],
                            thresholds=steps((None, "green"), (1, "orange")),
                        ),
                        6,
                        6,
                    ),
                ]
            ],
        ),
        (
            "Lag",
            [
                [
                    (
                        timeseries(
                            "Lag per group (records)",
                            "Each group's largest partition lag: its end (high watermark, or last stable "
                            "offset for lag.read_committed groups) minus the committed offset.",
                            "short",
                            [target(f"max by (cluster, group) (strait_group_max_lag_records{{{cg}}})", group_legend)],
                        ),
                        12,
                        8,
                    ),
                    (
                        timeseries(
                            "Lag per group (seconds)",
                            "How long ago the oldest record the group has not read was written, from that "
                            "record's own timestamp (exact, not interpolated); 0 when caught up.",
                            "s",
                            [target(f"max by (cluster, group) (strait_group_max_lag_seconds{{{cg}}})", group_legend)],
                        ),
                        12,
                        8,
                    ),
                ],
                [
                    (
                        timeseries(
                            "Lag per partition (records)",
                            "Per topic and partition (per topic, summed, with lag.partition_labels: false).",
                            "short",
                            [target(f"strait_group_lag_records{{{cg}}}", part_legend)],
                        ),
                        12,
                        8,
                    ),
                    (
                        timeseries(
                            "Lag per partition (seconds)",
                            "Per topic and partition (per topic, the largest, with lag.partition_labels: false).",
                            "s",
                            [target(f"strait_group_lag_seconds{{{cg}}}", part_legend)],
                        ),
                        12,
                        8,
                    ),
                ],
            ],
        ),
        (
            "Groups",
            [
                [
                    (
                        table(
                            "Status of every group",
                            "Each watched group's evaluated status and its state as its coordinator names "
                            "it (Stable, Empty, PreparingRebalance, ...).",
                            [
                                target(
                                    f"max by (cluster, group, status) (strait_group_status{{{cg}}} == 1)",
                                    "",
                                    instant=True,
                                    table=True,
                                ),
                                target(
                                    f"max by (cluster, group, state) (strait_group_state{{{cg}}} == 1)",
                                    "",
                                    instant=True,
                                    table=True,
                                ),
                            ],
                        ),
                        16,
                        8,
                    ),
                    (
                        timeseries(
                            "Polls failed",
                            "Polls of each cluster's groups that failed (a cluster away, refused "
                            "permissions); the last error is in /api/v1/groups.",
                            "short",
                            [target(f"sum by (cluster) ({polls_failed})", "{{cluster}}")],
                        ),
                        8,
                        8,
                    ),
                ]
            ],
        ),
    ]
    return dashboard(
        "strait-groups",
        "Strait consumer groups",
        "Every consumer group's lag, in records and seconds, on every cluster Strait watches (lag:), "
        "with a Burrow-style status. Metric catalogue and status rules: dashboards/README.md.",
        [
            query_variable("cluster", "Cluster", "label_values(strait_group_status, cluster)"),
            query_variable("group", "Group", 'label_values(strait_group_status{cluster=~"$cluster"}, group)'),
        ],
        layout(rows),
    )


# ---------------------------------------------------------------- main

DASHBOARDS = {"strait-gateway": gateway, "strait-mirror": mirror, "strait-groups": groups}


def render(board):
    return json.dumps(board, indent=2) + "\n"


def expressions(name, board):
    for panel in board["panels"]:
        for t in panel.get("targets", []):
            expr = t["expr"]
            for var, value in EXPR_SUBSTITUTIONS:
                expr = expr.replace(var, value)
            yield {"dashboard": name, "panel": panel["title"], "expr": expr}


def main(argv):
    if argv not in ([], ["--check"], ["--exprs"]):
        sys.stderr.write("usage: generate.py [--check | --exprs]\n")
        return 2
    boards = {name: build() for name, build in DASHBOARDS.items()}
    if argv == ["--exprs"]:
        for name, board in boards.items():
            for line in expressions(name, board):
                print(json.dumps(line))
        return 0
    stale = []
    for name, board in boards.items():
        path = os.path.join(HERE, name + ".json")
        text = render(board)
        if argv == ["--check"]:
            try:
                with open(path, encoding="utf-8") as f:
                    current = f.read()
            except FileNotFoundError:
                current = None
            if current != text:
                stale.append(path)
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            print(f"wrote {os.path.relpath(path)}")
    if stale:
        for path in stale:
            sys.stderr.write(f"{os.path.relpath(path)} differs from what generate.py writes\n")
        sys.stderr.write("run `python3 dashboards/generate.py` and commit the JSON files\n")
        return 1
    if argv == ["--check"]:
        print("dashboards: " + ", ".join(f"{name}.json" for name in boards) + " match generate.py")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
