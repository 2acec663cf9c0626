#!/usr/bin/env python3
"""Topic administration with confluent-kafka's AdminClient.

  ck_admin.py --bootstrap B create   --topic T [--partitions 8] [--replication-factor 1] [--config k=v ...]
  ck_admin.py --bootstrap B describe [--topic T]     (no --topic: every topic)
  ck_admin.py --bootstrap B delete   --topic T
  ck_admin.py --bootstrap B grow     --topic T --partitions N   (CreatePartitions: N in total)
  ck_admin.py --bootstrap B offsets  --topic T      (ListOffsets earliest + latest)
  ck_admin.py --bootstrap B committed --topic T --group G   (OffsetFetch, as lag tools read it)
  ck_admin.py --bootstrap B group --group G          (DescribeGroups)
  ck_admin.py --bootstrap B delete-group --group G   (DeleteGroups)
  ck_admin.py --bootstrap B commit --topic T --group G --partition P --offset O
                                                     (OffsetCommit of any offset, for a group without members)
  ck_admin.py --bootstrap B commit --topic T --group G --offsets P=O,P=O   (several partitions at once)

Prints one JSON line:
  create:   {"op": "create", "topic": T, "ok": bool, "error": null | "TOPIC_ALREADY_EXISTS: ..."}
  describe: {"op": "describe", "cluster_id": ..., "controller_id": n,
             "brokers": [{"id": n, "host": h, "port": p}],
             "topics": {T: {"partitions": n, "error": null | "...",
                            "leaders": {"p": id}, "replicas": {"p": [ids]}, "isrs": {"p": [ids]}}},
             "configs": {key: value} (with --topic; {} if DescribeConfigs failed),
             "configs_error": null | "..."}
  delete:   {"op": "delete", "topic": T, "ok": bool, "error": null | "..."}
  grow:     {"op": "grow", "topic": T, "ok": bool, "error": null | "..."}
  offsets:  {"op": "offsets", "topic": T, "earliest": {"p": o}, "latest": {"p": o}, "error": null | "..."}
  committed: {"op": "committed", "topic": T, "group": G, "committed": {"p": o | null}, "error": null | "..."}
  group:    {"op": "group", "group": G, "state": "STABLE" | ..., "members": [{"client_id": c,
             "assignment": ["topic:p", ...]}], "error": null | "..."}
  delete-group, commit: {"op": ..., "group": G, "ok": bool, "error": null | "..."}

Exit 1 (JSON still printed) when the operation failed (unless --allow-error).
"""

import argparse

from _common import emit, parse_kv, run

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import (AdminClient, ConfigResource, NewPartitions, NewTopic, OffsetSpec,
                                   ResourceType)


def err_text(e):
    if isinstance(e, KafkaException) and e.args:
        k = e.args[0]
        try:
            return "%s: %s" % (k.name(), k.str())
        except AttributeError:
            pass
    return str(e)


def main(t0):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("op", choices=["create", "describe", "delete", "offsets", "grow", "committed", "group",
                                   "delete-group", "commit"])
    ap.add_argument("--topic")
    ap.add_argument("--group", help="group id for committed")
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--partition", type=int, default=0, help="partition for commit")
    ap.add_argument("--offset", type=int, help="offset for commit")
    ap.add_argument("--offsets", help="partition=offset,... for commit")
    ap.add_argument("--replication-factor", type=int, default=1)
    ap.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                    help="topic config for create (repeatable)")
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--allow-error", action="store_true", help="exit 0 even if the operation failed")
    ap.add_argument("-X", dest="extra", action="append", default=[], metavar="KEY=VALUE",
                    help="extra librdkafka property (repeatable)")
    a = ap.parse_args()
    if a.op not in ("describe", "group", "delete-group") and not a.topic:
        ap.error("%s needs --topic" % a.op)
    if a.op in ("committed", "group", "delete-group", "commit") and not a.group:
        ap.error("%s needs --group" % a.op)
    if a.op == "commit" and a.offset is None and not a.offsets:
        ap.error("commit needs --offset")

    # Metadata must not create the topic it describes (Tansu auto-creates).
    conf = {"bootstrap.servers": a.bootstrap, "client.id": "ck_admin", "allow.auto.create.topics": False}
    conf.update(parse_kv(a.extra))
    admin = AdminClient(conf)
    result = {"op": a.op, "topic": a.topic, "error": None}

    if a.op == "create":
        nt = NewTopic(a.topic, num_partitions=a.partitions, replication_factor=a.replication_factor,
                      config=parse_kv(a.config))
        try:
            admin.create_topics([nt], operation_timeout=a.timeout, request_timeout=a.timeout)[a.topic].result()
        except Exception as e:  # noqa: BLE001
            result["error"] = err_text(e)

    elif a.op == "grow":
        try:
            admin.create_partitions([NewPartitions(a.topic, a.partitions)], operation_timeout=a.timeout,
                                    request_timeout=a.timeout)[a.topic].result()
        except Exception as e:  # noqa: BLE001
            result["error"] = err_text(e)

    elif a.op == "delete":
        try:
            admin.delete_topics([a.topic], operation_timeout=a.timeout, request_timeout=a.timeout)[a.topic].result()
        except Exception as e:  # noqa: BLE001
            result["error"] = err_text(e)

    elif a.op == "describe":
        md = admin.list_topics(a.topic, timeout=a.timeout) if a.topic else admin.list_topics(timeout=a.timeout)
        result["cluster_id"] = md.cluster_id
        result["controller_id"] = md.controller_id
        result["brokers"] = sorted(({"id": b.id, "host": b.host, "port": b.port} for b in md.brokers.values()),
                                   key=lambda b: b["id"])
        topics = {}
        for name, t in md.topics.items():
            topics[name] = {
                "partitions": len(t.partitions),
                "error": err_text(KafkaException(t.error)) if t.error is not None else None,
                "leaders": {str(p): pm.leader for p, pm in sorted(t.partitions.items())},
                "replicas": {str(p): list(pm.replicas) for p, pm in sorted(t.partitions.items())},
                "isrs": {str(p): list(pm.isrs) for p, pm in sorted(t.partitions.items())},
            }
        result["topics"] = topics
        if a.topic:
            if topics.get(a.topic, {}).get("error"):
                result["error"] = topics[a.topic]["error"]
            result["configs"], result["configs_error"] = {}, None
            try:
                res = ConfigResource(ResourceType.TOPIC, a.topic)
                cfg = admin.describe_configs([res], request_timeout=a.timeout)[res].result()
                result["configs"] = {k: v.value for k, v in sorted(cfg.items())}
            except Exception as e:  # noqa: BLE001
                result["configs_error"] = err_text(e)

    elif a.op == "offsets":
        result["earliest"], result["latest"] = {}, {}
        try:
            md = admin.list_topics(a.topic, timeout=a.timeout)
            t = md.topics[a.topic]
            if t.error is not None:
                raise KafkaException(t.error)
            for spec, key in ((OffsetSpec.earliest(), "earliest"), (OffsetSpec.latest(), "latest")):
                req = {TopicPartition(a.topic, p): spec for p in t.partitions}
                for tp, fut in admin.list_offsets(req, request_timeout=a.timeout).items():
                    result[key][str(tp.partition)] = fut.result().offset
        except Exception as e:  # noqa: BLE001
            result["error"] = err_text(e)

    elif a.op == "committed":
        from confluent_kafka import ConsumerGroupTopicPartitions
        result["group"], result["committed"] = a.group, {}
        try:
            md = admin.list_topics(a.topic, timeout=a.timeout)
            t = md.topics[a.topic]
            if t.error is not None:
                raise KafkaException(t.error)
            want = ConsumerGroupTopicPartitions(a.group, [TopicPartition(a.topic, p) for p in t.partitions])
            answer = admin.list_consumer_group_offsets([want], request_timeout=a.timeout)[a.group].result()
            for tp in answer.topic_partitions:
                if tp.error is not None:
                    raise KafkaException(tp.error)
                result["committed"][str(tp.partition)] = tp.offset if tp.offset >= 0 else None
        except Exception as e:  # noqa: BLE001
            result["error"] = err_text(e)

    elif a.op == "group":
        result["group"], result["members"], result["state"] = a.group, [], None
        try:
            d = admin.describe_consumer_groups([a.group], request_timeout=a.timeout)[a.group].result()
            result["state"] = d.state.name
            for m in d.members:
                parts = m.assignment.topic_partitions if m.assignment else []
                result["members"].append({
                    "client_id": m.client_id,
                    "assignment": sorted("%s:%d" % (tp.topic, tp.partition) for tp in parts),
                })
        except Exception as e:  # noqa: BLE001
            result["error"] = err_text(e)

    elif a.op == "delete-group":
        result["group"] = a.group
        try:
            admin.delete_consumer_groups([a.group], request_timeout=a.timeout)[a.group].result()
        except Exception as e:  # noqa: BLE001
            result["error"] = err_text(e)

    elif a.op == "commit":
        from confluent_kafka import ConsumerGroupTopicPartitions
        result["group"] = a.group
        try:
            if a.offsets:
                pairs = [item.split("=") for item in a.offsets.split(",")]
                parts = [TopicPartition(a.topic, int(p), int(o)) for p, o in pairs]
            else:
                parts = [TopicPartition(a.topic, a.partition, a.offset)]
            want = ConsumerGroupTopicPartitions(a.group, parts)
            answer = admin.alter_consumer_group_offsets([want], request_timeout=a.timeout)[a.group].result()
            for tp in answer.topic_partitions:
                if tp.error is not None:
                    raise KafkaException(tp.error)
        except Exception as e:  # noqa: BLE001
            result["error"] = err_text(e)

    result["ok"] = result["error"] is None
    ok = result["ok"] or a.allow_error
    emit(result, ok, None if ok else "ck_admin %s: %s" % (a.op, result["error"]))


if __name__ == "__main__":
    run(main)
