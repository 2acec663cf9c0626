#!/usr/bin/env python3
"""Topic administration with kafka-python's KafkaAdminClient.

The same operations and output shapes as ck_admin.py:

  kp_admin.py --bootstrap B create   --topic T [--partitions 8] [--replication-factor 1] [--config k=v ...]
  kp_admin.py --bootstrap B describe [--topic T]     (no --topic: every topic)
  kp_admin.py --bootstrap B delete   --topic T

Prints one JSON line:
  create:   {"op": "create", "topic": T, "ok": bool, "error": null | "TopicAlreadyExistsError: ..."}
  describe: {"op": "describe", "cluster_id": ..., "controller_id": n,
             "brokers": [{"id": n, "host": h, "port": p}],
             "topics": {T: {"partitions": n, "error": null | "...",
                            "leaders": {"p": id}, "replicas": {"p": [ids]}, "isrs": {"p": [ids]}}},
             "configs": {key: value} (with --topic; {} if DescribeConfigs failed),
             "configs_error": null | "..."}
  delete:   {"op": "delete", "topic": T, "ok": bool, "error": null | "..."}

Errors are "<ExceptionClass>: <errno>" (e.g. "TopicAlreadyExistsError: 36"),
or "<ERROR_NAME>: <code>" for an error code found in a describe answer.
Exit 1 (JSON still printed) when the operation failed (unless --allow-error).
"""

import argparse

from _common import emit, parse_kp_options, parse_kv, run

import kafka.errors as Errors
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType


def err_text(e):
    errno = getattr(e, "errno", None)
    if errno is not None:
        return "%s: %s" % (type(e).__name__, errno)
    return "%s: %s" % (type(e).__name__, e)


def code_text(code):
    if not code:
        return None
    return "%s: %d" % (Errors.for_code(code).__name__, code)


def main(t0):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("op", choices=["create", "describe", "delete"])
    ap.add_argument("--topic")
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--replication-factor", type=int, default=1)
    ap.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                    help="topic config for create (repeatable)")
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--allow-error", action="store_true", help="exit 0 even if the operation failed")
    ap.add_argument("-X", dest="extra", action="append", default=[], metavar="KEY=VALUE",
                    help="extra KafkaAdminClient option (repeatable)")
    a = ap.parse_args()
    if a.op != "describe" and not a.topic:
        ap.error("%s needs --topic" % a.op)

    conf = dict(bootstrap_servers=a.bootstrap, client_id="kp_admin",
                request_timeout_ms=int(a.timeout * 1000))
    conf.update(parse_kp_options(a.extra))
    admin = KafkaAdminClient(**conf)
    result = {"op": a.op, "topic": a.topic, "error": None}
    timeout_ms = int(a.timeout * 1000)

    if a.op == "create":
        spec = {a.topic: {"num_partitions": a.partitions, "replication_factor": a.replication_factor,
                          "configs": parse_kv(a.config)}}
        try:
            admin.create_topics(spec, timeout_ms=timeout_ms)
        except Exception as e:  # noqa: BLE001
            result["error"] = err_text(e)

    elif a.op == "delete":
        try:
            admin.delete_topics([a.topic], timeout_ms=timeout_ms)
        except Exception as e:  # noqa: BLE001
            result["error"] = err_text(e)

    elif a.op == "describe":
        cluster = admin.describe_cluster()
        result["cluster_id"] = cluster.get("cluster_id")
        result["controller_id"] = cluster.get("controller_id")
        result["brokers"] = sorted(({"id": b["broker_id"], "host": b["host"], "port": b["port"]}
                                    for b in cluster.get("brokers", [])), key=lambda b: b["id"])
        described = admin.describe_topics([a.topic] if a.topic else None)
        topics = {}
        for t in described:
            parts = sorted(t.get("partitions") or [], key=lambda p: p["partition_index"])
            topics[t["name"]] = {
                "partitions": len(parts),
                "error": code_text(t.get("error_code")),
                "leaders": {str(p["partition_index"]): p["leader_id"] for p in parts},
                "replicas": {str(p["partition_index"]): list(p["replica_nodes"]) for p in parts},
                "isrs": {str(p["partition_index"]): list(p["isr_nodes"]) for p in parts},
            }
        result["topics"] = topics
        if a.topic:
            if topics.get(a.topic, {}).get("error"):
                result["error"] = topics[a.topic]["error"]
            result["configs"], result["configs_error"] = {}, None
            try:
                res = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, a.topic)],
                                             config_filter="all")
                cfg = res.get("topic", {}).get(a.topic, {})
                result["configs"] = {k: v.get("value") for k, v in sorted(cfg.items())}
            except Exception as e:  # noqa: BLE001
                result["configs_error"] = err_text(e)

    try:
        admin.close()
    except Exception:  # noqa: BLE001
        pass
    result["ok"] = result["error"] is None
    ok = result["ok"] or a.allow_error
    emit(result, ok, None if ok else "kp_admin %s: %s" % (a.op, result["error"]))


if __name__ == "__main__":
    run(main)
