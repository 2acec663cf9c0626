#!/usr/bin/env python3
"""Consume with a group of kafka-python consumers until N records are seen.

The same flags and output as ck_consume.py: --members KafkaConsumers (one
thread each) in group --group, subscribed to --topic, auto_offset_reset
earliest, auto commit off; with --commit each member commits what it
consumed on revocation (asynchronously: kafka-python 3 forbids blocking
calls in a rebalance listener) and synchronously at the end. Prints:

  {"records": distinct, "received": n, "duplicates": d, "expect": N,
   "by_member": {"0": n}, "partitions": {"p": n}, "offsets": {"p": [min, max]},
   "per_partition_in_order": bool, "order_violations": [...],
   "values_sha": "...", "committed": {"p": offset or null}, "errors": [...],
   "elapsed_s": s, "records_list": [[p, offset, key, value]] (--records)}

--assign: no group; one consumer assigns all partitions from offset 0.
-X takes KafkaConsumer options (e.g. -X api_version=2.5.0).
Exit 1 (JSON still printed) when fewer than N records were seen in time.
"""

import argparse
import threading
import time

from _common import OrderCheck, consumed, decode, emit, parse_kp_options, run

from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata


def main(t0):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--group", help="group id (required unless --assign)")
    ap.add_argument("--expect", type=int, required=True)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--members", type=int, default=1)
    ap.add_argument("--commit", action="store_true")
    ap.add_argument("--linger", type=float, default=0.0)
    ap.add_argument("--records", action="store_true")
    ap.add_argument("--assign", action="store_true",
                    help="no group: one consumer assigns every partition from the beginning")
    ap.add_argument("-X", dest="extra", action="append", default=[], metavar="KEY=VALUE",
                    help="extra KafkaConsumer option (repeatable)")
    a = ap.parse_args()
    if a.assign:
        a.members, a.commit = 1, False
    elif not a.group:
        ap.error("--group is required unless --assign")
    extra = parse_kp_options(a.extra)

    lock = threading.Lock()
    seen = {}
    received = [0]
    by_member = {}
    order = OrderCheck()
    errors = []
    done = threading.Event()
    reached_at = [None]
    consumers = []

    def member(idx):
        conf = dict(
            bootstrap_servers=a.bootstrap,
            group_id=None if a.assign else a.group,
            client_id="kp_consume-%d" % idx,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=10000,
            heartbeat_interval_ms=1000,
        )
        conf.update(extra)
        try:
            c = KafkaConsumer(**conf)
        except Exception as e:  # noqa: BLE001
            with lock:
                errors.append("member %d: %s: %s" % (idx, type(e).__name__, e))
            return
        consumers.append(c)
        consumed = {}
        mine = OrderCheck()

        def commit_errback(_offsets, res):
            if isinstance(res, Exception):
                with lock:
                    errors.append("commit: %s: %s" % (type(res).__name__, res))

        def commit_consumed(parts=None, blocking=True):
            offs = {TopicPartition(a.topic, p): OffsetAndMetadata(o, "", -1) for p, o in consumed.items()
                    if parts is None or p in parts}
            if a.commit and offs:
                try:
                    if blocking:
                        c.commit(offs)
                    else:
                        # kafka-python 3 forbids blocking calls in a rebalance
                        # listener; the commit is queued before the rejoin.
                        c.commit_async(offs, callback=commit_errback)
                except Exception as e:  # noqa: BLE001
                    with lock:
                        errors.append("commit: %s: %s" % (type(e).__name__, e))

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                ps = {tp.partition for tp in revoked}
                commit_consumed(ps, blocking=False)
                for p in ps:
                    consumed.pop(p, None)

            def on_partitions_assigned(self, assigned):
                mine.assign(tp.partition for tp in assigned)

        if a.assign:
            parts, deadline = None, time.monotonic() + 30
            while not parts and time.monotonic() < deadline:
                parts = c.partitions_for_topic(a.topic)
                if not parts:
                    time.sleep(0.2)
            if not parts:
                with lock:
                    errors.append("no partitions for %s" % a.topic)
                parts = []
            tps = [TopicPartition(a.topic, p) for p in sorted(parts)]
            c.assign(tps)
            c.seek_to_beginning(*tps)
        else:
            c.subscribe([a.topic], listener=Listener())
        count = 0
        while not done.is_set():
            try:
                batch = c.poll(timeout_ms=200)
            except Exception as e:  # noqa: BLE001
                with lock:
                    errors.append("poll: %s: %s" % (type(e).__name__, e))
                time.sleep(0.2)
                continue
            for _tp, msgs in batch.items():
                for m in msgs:
                    mine.see(m.partition, m.offset)
                    consumed[m.partition] = m.offset + 1
                    count += 1
                    with lock:
                        received[0] += 1
                        by_member[str(idx)] = count
                        seen.setdefault((m.partition, m.offset), (decode(m.key), decode(m.value)))
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
            parts = sorted(c.partitions_for_topic(a.topic) or [])
            for p in parts:
                off = c.committed(TopicPartition(a.topic, p))
                committed[str(p)] = off
        except Exception as e:  # noqa: BLE001
            errors.append("committed: %s: %s" % (type(e).__name__, e))
    for c in consumers:
        try:
            c.close(autocommit=False)
        except Exception as e:  # noqa: BLE001
            errors.append("close: %s: %s" % (type(e).__name__, e))

    result = consumed(t0, a, seen, received[0], by_member, order, committed, errors)
    ok = len(seen) >= a.expect
    emit(result, ok, None if ok else "kp_consume: saw %d of %d records in %.0f s" % (len(seen), a.expect, a.timeout))


if __name__ == "__main__":
    run(main)
