#!/usr/bin/env python3
"""Consume with a group of confluent-kafka consumers until N records are seen.

Starts --members consumers (one thread each) in group --group, subscribed to
--topic (auto.offset.reset=earliest, auto commit off). They consume until N
distinct (partition, offset) records were seen in total, or --timeout. With
--commit each member commits what it consumed synchronously when partitions
are revoked and once more at the end (at-least-once hand-over in rebalances).
Then prints:

  {"records": distinct records, "received": all deliveries incl. duplicates,
   "duplicates": received - records, "expect": N,
   "by_member": {"0": n, ...}, "partitions": {"p": distinct count},
   "offsets": {"p": [min, max]}, "per_partition_in_order": bool,
   "order_violations": [[p, previous offset, offset], ...],
   "values_sha": "<sha256 of sorted distinct values>",
   "committed": {"p": offset or null}, "elapsed_s": s,
   "records_list": [[p, offset, key, value], ...]   (only with --records)}

--assign: no group; one consumer assigns all partitions from offset 0 (no
commits; "committed" stays {}).

--topic takes a comma-separated list: the group subscribes to all of them,
and partitions are then named "topic:p" in the JSON.

Exit 1 (JSON still printed) when fewer than N records were seen in time.
"""

import argparse
import threading
import time

from _common import OrderCheck, consumed, decode, emit, parse_kv, run

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition


def main(t0):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--group", help="group id (required unless --assign)")
    ap.add_argument("--expect", type=int, required=True)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--members", type=int, default=1)
    ap.add_argument("--commit", action="store_true")
    ap.add_argument("--linger", type=float, default=0.0,
                    help="keep consuming this many seconds after N were seen (to catch extras)")
    ap.add_argument("--records", action="store_true", help="include every record in the JSON")
    ap.add_argument("--assign", action="store_true",
                    help="no group: one consumer assigns every partition from the beginning")
    ap.add_argument("-X", dest="extra", action="append", default=[], metavar="KEY=VALUE",
                    help="extra librdkafka property (repeatable)")
    a = ap.parse_args()
    if a.assign:
        a.members, a.commit = 1, False
    elif not a.group:
        ap.error("--group is required unless --assign")
    extra = parse_kv(a.extra)
    topics = a.topic.split(",")

    def pkey(topic, partition):
        return partition if len(topics) == 1 else "%s:%d" % (topic, partition)

    lock = threading.Lock()
    seen = {}  # (partition, offset) -> (key, value)
    received = [0]
    by_member = {}
    order = OrderCheck()
    errors = []
    done = threading.Event()
    reached_at = [None]
    consumers = []

    def member(idx):
        conf = {
            "bootstrap.servers": a.bootstrap,
            "group.id": a.group or "ck_consume-assign",
            "client.id": "ck_consume-%d" % idx,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 1000,
        }
        conf.update(extra)
        c = Consumer(conf)
        consumers.append(c)
        consumed = {}  # (topic, partition) -> next offset to commit
        mine = OrderCheck()

        def commit_consumed(parts=None):
            offs = [TopicPartition(t, p, o) for (t, p), o in consumed.items()
                    if parts is None or (t, p) in parts]
            if a.commit and offs:
                try:
                    c.commit(offsets=offs, asynchronous=False)
                except KafkaException as e:
                    with lock:
                        errors.append("commit: %s" % e)

        def on_assign(_c, parts):
            mine.assign(pkey(tp.topic, tp.partition) for tp in parts)

        def on_revoke(_c, parts):
            ps = {(tp.topic, tp.partition) for tp in parts}
            commit_consumed(ps)
            for p in ps:
                consumed.pop(p, None)

        if a.assign:
            md = c.list_topics(a.topic, timeout=30)
            parts = sorted(md.topics[a.topic].partitions) if a.topic in md.topics else []
            if not parts:
                with lock:
                    errors.append("no partitions for %s: %s" % (a.topic, md.topics.get(a.topic) and md.topics[a.topic].error))
            c.assign([TopicPartition(a.topic, p, OFFSET_BEGINNING) for p in parts])
        else:
            c.subscribe(topics, on_assign=on_assign, on_revoke=on_revoke)
        count = 0
        while not done.is_set():
            msg = c.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                with lock:
                    errors.append("%s: %s" % (msg.error().name(), msg.error().str()))
                continue
            part, off = pkey(msg.topic(), msg.partition()), msg.offset()
            mine.see(part, off)
            consumed[(msg.topic(), msg.partition())] = off + 1
            count += 1
            with lock:
                received[0] += 1
                by_member[str(idx)] = count
                seen.setdefault((part, off), (decode(msg.key()), decode(msg.value())))
                if len(seen) >= a.expect and reached_at[0] is None:
                    reached_at[0] = time.monotonic()
        commit_consumed()
        with lock:
            if not mine.in_order:
                order.in_order = False
                order.violations.extend(mine.violations)
        by_member.setdefault(str(idx), count)

    threads = [threading.Thread(target=member, args=(i,), daemon=True) for i in range(a.members)]
    for t in threads:
        t.start()
    deadline = t0 + a.timeout
    while time.monotonic() < deadline:
        with lock:
            r = reached_at[0]
        if r is not None and time.monotonic() >= r + a.linger:
            break
        time.sleep(0.05)
    done.set()
    for t in threads:
        t.join(30)

    committed = {}
    if consumers and not a.assign:
        c = consumers[0]
        try:
            for topic in topics:
                md = c.list_topics(topic, timeout=10)
                parts = sorted(md.topics[topic].partitions) if topic in md.topics else []
                for tp in c.committed([TopicPartition(topic, p) for p in parts], timeout=10):
                    committed[str(pkey(topic, tp.partition))] = tp.offset if tp.offset >= 0 else None
        except KafkaException as e:
            errors.append("committed: %s" % e)
    for c in consumers:
        try:
            c.close()
        except Exception as e:  # noqa: BLE001
            errors.append("close: %s" % e)

    result = consumed(t0, a, seen, received[0], by_member, order, committed, errors)
    ok = len(seen) >= a.expect
    emit(result, ok, None if ok else "ck_consume: saw %d of %d records in %.0f s" % (len(seen), a.expect, a.timeout))


if __name__ == "__main__":
    run(main)
