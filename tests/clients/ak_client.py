#!/usr/bin/env python3
"""The aiokafka client (aiokafka 0.14, asyncio), driven from the Rust
integration tests like the other scripts beside it: the same flags and the
same JSON shapes as ck_produce.py, ck_consume.py and ck_admin.py (see
README.md), one JSON object on the last stdout line; exit 0 done, 1 fell
short (JSON still printed), 2 bad arguments, 3 crash (traceback on stderr).

  ak_client.py produce --bootstrap B --topic T --count N [--start S]
      [--compression none|gzip|snappy|lz4|zstd] [--acks 0|1|all]
      [--idempotent] [--keyed] [--partition P] [--value-size N]
      [--value-prefix P] [--linger-ms MS] [--timeout S]
  ak_client.py consume --bootstrap B --topic T --expect N
      (--group G [--members M] [--commit] | --assign)
      [--linger S] [--records] [--timeout S]
  ak_client.py admin --bootstrap B create|describe|delete|offsets
      [--topic T] [--partitions 8] [--replication-factor 1]
      [--config k=v ...] [--timeout S] [--allow-error]
  ak_client.py version       (aiokafka and codec versions, one line)

Every command takes -X key=value (repeatable): extra keyword arguments for
AIOKafkaProducer, AIOKafkaConsumer or AIOKafkaAdminClient (ints and
true/false typed, e.g. -X max_batch_size=65536). AK_CLIENT_LOG=DEBUG (or
INFO...) sets the level of aiokafka's logging, which goes to stderr
(default WARNING).

How it differs from the librdkafka scripts, because aiokafka works so:
- produce: one AIOKafkaProducer; every record's RecordMetadata comes from the
  future send() returns (acks=0: None, so no offset). The partitioner is
  aiokafka's DefaultPartitioner (murmur2 as Java's for keyed records, a random
  available partition for unkeyed ones). --idempotent needs --acks all
  (aiokafka refuses otherwise: exit 2). --timeout is also the producer's
  request_timeout_ms (which bounds how long a batch may wait). A send() that
  fails (no metadata for the topic, buffer full past the timeout) stops
  producing: it and every later record count as errors.
- consume: the members are AIOKafkaConsumers in one asyncio loop (not
  threads). aiokafka awaits the rebalance listener, so --commit commits
  synchronously in on_partitions_revoked, as ck_consume.py does.
  --expect 0 counts as reached at the start (then --linger applies).
- admin: AIOKafkaAdminClient returns raw responses; their error codes become
  "KAFKA_ERROR_NAME: message" with the names as Kafka spells them. describe
  sends Metadata itself with allow_auto_topic_creation=false (the admin
  client's describe_topics would allow it); offsets sends ListOffsets itself
  to each partition's leader (the admin client has no list_offsets).
- Codecs: gzip is Python's own; snappy, lz4 and zstd all come from cramjam
  (aiokafka 0.13+ no longer uses python-snappy, lz4 or zstandard).
"""

import argparse
import asyncio
import logging
import os
import sys
import time

from _common import (OrderCheck, consumed, decode, emit, parse_kp_options, parse_kv, produced, run,
                     top_errors, value_for)

try:
    import aiokafka
    import aiokafka.errors as Errors
    import async_timeout
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
    from aiokafka.partitioner import DefaultPartitioner
    from aiokafka.protocol.metadata import MetadataRequest
    from aiokafka.protocol.offset import OffsetRequest
except ImportError as _e:  # pragma: no cover - reported, not raised
    print("ak_client: cannot import aiokafka (%s): pip install aiokafka into the venv" % _e, file=sys.stderr)
    sys.exit(3)

CLIENT = "aiokafka %s" % aiokafka.__version__

# --- errors ----------------------------------------------------------------------

# Kafka's names (org.apache.kafka.common.protocol.Errors) where aiokafka's
# table spells them differently or lacks them.
_KAFKA_NAMES = {
    -1: "UNKNOWN_SERVER_ERROR",
    6: "NOT_LEADER_OR_FOLLOWER",
    10: "MESSAGE_TOO_LARGE",
    13: "NETWORK_EXCEPTION",
    17: "INVALID_TOPIC_EXCEPTION",
    39: "INVALID_REPLICA_ASSIGNMENT",
}
_KAFKA_NAMES.update(enumerate((
    "TOPIC_DELETION_DISABLED FENCED_LEADER_EPOCH UNKNOWN_LEADER_EPOCH UNSUPPORTED_COMPRESSION_TYPE "
    "STALE_BROKER_EPOCH OFFSET_NOT_AVAILABLE MEMBER_ID_REQUIRED PREFERRED_LEADER_NOT_AVAILABLE "
    "GROUP_MAX_SIZE_REACHED FENCED_INSTANCE_ID ELIGIBLE_LEADERS_NOT_AVAILABLE ELECTION_NOT_NEEDED "
    "NO_REASSIGNMENT_IN_PROGRESS GROUP_SUBSCRIBED_TO_TOPIC INVALID_RECORD UNSTABLE_OFFSET_COMMIT "
    "THROTTLING_QUOTA_EXCEEDED PRODUCER_FENCED RESOURCE_NOT_FOUND DUPLICATE_RESOURCE "
    "UNACCEPTABLE_CREDENTIAL INCONSISTENT_VOTER_SET INVALID_UPDATE_VERSION FEATURE_UPDATE_FAILED "
    "PRINCIPAL_DESERIALIZATION_FAILURE SNAPSHOT_NOT_FOUND POSITION_OUT_OF_RANGE UNKNOWN_TOPIC_ID "
    "DUPLICATE_BROKER_REGISTRATION BROKER_ID_NOT_REGISTERED INCONSISTENT_TOPIC_ID "
    "INCONSISTENT_CLUSTER_ID TRANSACTIONAL_ID_NOT_FOUND FETCH_SESSION_TOPIC_ID_ERROR "
    "INELIGIBLE_REPLICA NEW_LEADER_ELECTED OFFSET_MOVED_TO_TIERED_STORAGE FENCED_MEMBER_EPOCH "
    "UNRELEASED_INSTANCE_ID UNSUPPORTED_ASSIGNOR STALE_MEMBER_EPOCH MISMATCHED_ENDPOINT_TYPE "
    "UNSUPPORTED_ENDPOINT_TYPE UNKNOWN_CONTROLLER_ID UNKNOWN_SUBSCRIPTION_ID TELEMETRY_TOO_LARGE "
    "INVALID_REGISTRATION TRANSACTION_ABORTABLE"
).split(), start=73))


def kafka_name(code):
    if code in _KAFKA_NAMES:
        return _KAFKA_NAMES[code]
    cls = Errors.kafka_errors.get(code)
    return cls.message if cls is not None else "UNKNOWN_ERROR_CODE_%d" % code


def code_text(code, message=None):
    """'NAME: message' for a non-zero error code of a response, else None."""
    if not code:
        return None
    if not message:
        cls = Errors.kafka_errors.get(code)
        message = cls.description if cls is not None and cls.description else "error code %d" % code
    return "%s: %s" % (kafka_name(code), message)


def err_text(e):
    if isinstance(e, Errors.BrokerResponseError):
        detail = " ".join(str(x) for x in e.args if x) or e.description or type(e).__name__
        return "%s: %s" % (kafka_name(e.errno), detail)
    text = str(e)
    if isinstance(e, Errors.KafkaError) and text.startswith(type(e).__name__):
        return text  # KafkaError's str already reads 'ClassName: ...'
    return "%s: %s" % (type(e).__name__, text or repr(e))


async def start_with_retry(make, deadline):
    """make() a client and start() it, retrying with a fresh one until deadline
    (librdkafka keeps trying to reach a broker that is not up yet; aiokafka's
    start() fails at once). Returns (client, None) or (None, last error)."""
    while True:
        client = make()
        ok, why = await wait_for(client.start(), deadline - time.monotonic())
        if ok:
            return client, None
        stop = client.close() if isinstance(client, AIOKafkaAdminClient) else client.stop()
        await wait_for(stop, 5)
        if time.monotonic() + 0.5 >= deadline:
            return None, why
        await asyncio.sleep(0.5)


async def wait_for(aw, timeout):
    """await aw for at most timeout s: (True, result) or (False, error text)."""
    try:
        return True, await asyncio.wait_for(aw, max(0.001, timeout))
    except asyncio.TimeoutError:
        return False, "timed out after %.1f s" % timeout
    except Exception as e:  # noqa: BLE001
        return False, err_text(e)


# --- produce -----------------------------------------------------------------------

async def produce(a, t0):
    acks = {"0": 0, "1": 1, "all": "all", "-1": "all"}[a.acks]
    prefix = a.value_prefix if a.value_prefix is not None else a.compression
    conf = dict(
        bootstrap_servers=a.bootstrap,
        client_id="ak_produce",
        compression_type=None if a.compression == "none" else a.compression,
        acks=acks,
        linger_ms=a.linger_ms,
        enable_idempotence=a.idempotent,
        request_timeout_ms=int(a.timeout * 1000),
    )
    conf.update(parse_kp_options(a.extra))
    # aiokafka's partitioner, remembering its choice: with acks=0 the result
    # names no partition, yet "partitions" counts each record's.
    chosen = [None]
    if "partitioner" not in conf:
        inner = DefaultPartitioner()

        def partitioner(key, all_partitions, available):
            chosen[0] = inner(key, all_partitions, available)
            return chosen[0]

        conf["partitioner"] = partitioner
    try:
        first = [AIOKafkaProducer(**conf)]  # checks the options now, before any connection
    except (RuntimeError, ValueError) as e:
        # A codec whose library is missing, idempotence without acks=all.
        print("ak_client produce: %s" % e, file=sys.stderr)
        sys.exit(2)

    delivered = []  # (partition, offset or None, value)
    errors = []  # one per failed record
    pending = []  # (future, value, partition)
    deadline = t0 + a.timeout + 5

    p, why = await start_with_retry(lambda: first.pop() if first else AIOKafkaProducer(**conf), t0 + a.timeout)
    if p is None:
        errors.extend(["start: %s" % why] * a.count)
    else:
        end = a.start + a.count
        try:
            # One deadline for the loop (not a timer per send: too slow).
            async with async_timeout.timeout(max(0.001, deadline - time.monotonic())):
                for i in range(a.start, end):
                    value = value_for(prefix, i, a.value_size)
                    kw = {"value": value.encode("utf-8", "surrogateescape")}
                    if a.keyed:
                        kw["key"] = ("k%d" % (i % 16)).encode()
                    if a.partition is not None:
                        kw["partition"] = a.partition
                    chosen[0] = None
                    try:
                        # Waits for metadata and buffer space.
                        fut = await p.send(a.topic, **kw)
                    except Exception as e:  # noqa: BLE001
                        # This record and the later ones are not handed over.
                        errors.extend(["send: %s" % err_text(e)] * (end - i))
                        break
                    pending.append((fut, value, a.partition if a.partition is not None else chosen[0]))
        except asyncio.TimeoutError:
            pass  # out of time: the rest stays undelivered
        if pending:
            await asyncio.wait([f for f, _, _ in pending], timeout=max(0.001, deadline - time.monotonic()))
        unfinished = 0
        for fut, value, part in pending:
            if not fut.done():
                unfinished += 1
                fut.cancel()
                continue
            e = fut.exception() if not fut.cancelled() else asyncio.CancelledError("cancelled")
            if e is not None:
                errors.append(err_text(e))
                continue
            md = fut.result()
            if md is None:  # acks=0: no offset
                delivered.append((part, None, value))
            else:
                delivered.append((md.partition, md.offset, value))
        # stop() flushes what is still queued: do not wait long for that.
        await wait_for(p.stop(), 2 if unfinished else 10)

    result = produced(t0, a.count, delivered, errors,
                      undelivered=a.count - len(delivered) - len(errors), client=CLIENT)
    ok = len(delivered) == a.count
    return result, ok, None if ok else "ak_client produce: delivered %d of %d (%s)" % (
        len(delivered), a.count, top_errors(errors)[:3])


# --- consume ---------------------------------------------------------------------

async def consume(a, t0):
    extra = parse_kp_options(a.extra)
    seen = {}  # (partition, offset) -> (key, value)
    state = {"received": 0, "reached_at": time.monotonic() if a.expect <= 0 else None, "done": False}
    by_member = {}
    order = OrderCheck()
    errors = []
    consumers = []

    class Member:
        def __init__(self, idx):
            self.idx = idx
            self.c = None
            self.consumed = {}  # partition -> next offset to commit
            self.mine = OrderCheck()
            self.count = 0

        async def commit_consumed(self, parts=None):
            if not a.commit:
                return
            assigned = {tp.partition for tp in self.c.assignment()}
            offs = {TopicPartition(a.topic, p): o for p, o in self.consumed.items()
                    if (parts is None or p in parts) and p in assigned}
            if not offs:
                return
            try:
                await self.c.commit(offs)
            except Exception as e:  # noqa: BLE001
                errors.append("commit: %s" % err_text(e))

        async def run(self):
            idx = self.idx
            conf = dict(
                bootstrap_servers=a.bootstrap,
                group_id=None if a.assign else a.group,
                client_id="ak_consume-%d" % idx,
                auto_offset_reset="earliest",
                enable_auto_commit=False,
                session_timeout_ms=10000,
                heartbeat_interval_ms=1000,
            )
            conf.update(extra)
            by_member.setdefault(str(idx), 0)
            c, why = await start_with_retry(lambda: AIOKafkaConsumer(**conf), t0 + a.timeout)
            if c is None:
                errors.append("member %d: %s" % (idx, why))
                return
            self.c = c
            consumers.append(c)
            member = self

            class Listener(ConsumerRebalanceListener):
                async def on_partitions_revoked(self, revoked):
                    ps = {tp.partition for tp in revoked if tp.topic == a.topic}
                    await member.commit_consumed(ps)
                    for p in ps:
                        member.consumed.pop(p, None)

                async def on_partitions_assigned(self, assigned):
                    member.mine.assign(tp.partition for tp in assigned if tp.topic == a.topic)

            if a.assign:
                parts, why = [], None
                while not parts and time.monotonic() < t0 + a.timeout and not state["done"]:
                    try:
                        md = await c._client.fetch_all_metadata()
                        parts = sorted(md.partitions_for_topic(a.topic) or [])
                    except Exception as e:  # noqa: BLE001
                        why = err_text(e)
                    if not parts:
                        await asyncio.sleep(0.5)
                if not parts:
                    errors.append("no partitions for %s: %s" % (a.topic, why or "not in metadata"))
                    return
                tps = [TopicPartition(a.topic, p) for p in parts]
                c.assign(tps)
                await c.seek_to_beginning(*tps)
            else:
                c.subscribe([a.topic], listener=Listener())

            while not state["done"]:
                try:
                    batches = await c.getmany(timeout_ms=200)
                except Exception as e:  # noqa: BLE001
                    errors.append(err_text(e))
                    await asyncio.sleep(0.2)
                    continue
                for tp, msgs in batches.items():
                    for m in msgs:
                        part, off = m.partition, m.offset
                        self.mine.see(part, off)
                        self.consumed[part] = off + 1
                        self.count += 1
                        state["received"] += 1
                        by_member[str(idx)] = self.count
                        seen.setdefault((part, off), (decode(m.key), decode(m.value)))
                        if len(seen) >= a.expect and state["reached_at"] is None:
                            state["reached_at"] = time.monotonic()

        async def main(self):
            try:
                await self.run()
            except Exception as e:  # noqa: BLE001
                errors.append("member %d: %s" % (self.idx, err_text(e)))
            if self.c is not None and self.c in consumers:
                await self.commit_consumed()
            if not self.mine.in_order:
                order.in_order = False
                order.violations.extend(self.mine.violations)

    members = [Member(i) for i in range(a.members)]
    tasks = [asyncio.ensure_future(m.main()) for m in members]
    deadline = t0 + a.timeout
    while time.monotonic() < deadline:
        r = state["reached_at"]
        if r is not None and time.monotonic() >= r + a.linger:
            break
        if all(t.done() for t in tasks):
            break
        await asyncio.sleep(0.05)
    state["done"] = True
    _, late = await asyncio.wait(tasks, timeout=30)
    for t in late:
        errors.append("member did not stop in 30 s")
        t.cancel()

    committed = {}
    if consumers and not a.assign:
        c = consumers[0]
        try:
            md = await asyncio.wait_for(c._client.fetch_all_metadata(), 10)
            for p in sorted(md.partitions_for_topic(a.topic) or []):
                off = await asyncio.wait_for(c.committed(TopicPartition(a.topic, p)), 10)
                committed[str(p)] = off if off is not None and off >= 0 else None
        except Exception as e:  # noqa: BLE001
            errors.append("committed: %s" % err_text(e))
    for c in consumers:
        ok, why = await wait_for(c.stop(), 15)
        if not ok:
            errors.append("close: %s" % why)

    result = consumed(t0, a, seen, state["received"], by_member, order, committed, errors)
    ok = len(seen) >= a.expect
    return result, ok, None if ok else "ak_client consume: saw %d of %d records in %.0f s" % (
        len(seen), a.expect, a.timeout)


# --- admin -----------------------------------------------------------------------

async def metadata(admin, topics):
    """Metadata for topics (None: every topic), never creating one."""
    req = MetadataRequest(topics, allow_auto_topic_creation=False)
    return (await admin._send_request(req)).to_object()


async def admin_op(a, t0):
    result = {"op": a.op, "topic": a.topic, "error": None}
    conf = dict(bootstrap_servers=a.bootstrap, client_id="ak_admin", request_timeout_ms=int(a.timeout * 1000))
    conf.update(parse_kp_options(a.extra))
    timeout_ms = int(a.timeout * 1000)
    admin, why = await start_with_retry(lambda: AIOKafkaAdminClient(**conf), t0 + a.timeout)
    if admin is None:
        result["error"] = "start: %s" % why
        if a.op == "describe":
            result.update(cluster_id=None, controller_id=None, brokers=[], topics={})
            if a.topic:
                result.update(configs={}, configs_error=None)
        elif a.op == "offsets":
            result.update(earliest={}, latest={})

    elif a.op == "create":
        try:
            nt = NewTopic(a.topic, a.partitions, a.replication_factor, topic_configs=parse_kv(a.config))
            resp = (await admin.create_topics([nt], timeout_ms=timeout_ms)).to_object()
            for t in resp["topic_errors"]:
                if t["topic"] == a.topic and t["error_code"]:
                    result["error"] = code_text(t["error_code"], t.get("error_message"))
        except Exception as e:  # noqa: BLE001
            result["error"] = err_text(e)

    elif a.op == "delete":
        try:
            resp = (await admin.delete_topics([a.topic], timeout_ms=timeout_ms)).to_object()
            for t in resp["topic_error_codes"]:
                if t["topic"] == a.topic and t["error_code"]:
                    result["error"] = code_text(t["error_code"])
        except Exception as e:  # noqa: BLE001
            result["error"] = err_text(e)

    elif a.op == "describe":
        md = await metadata(admin, [a.topic] if a.topic else None)
        result["cluster_id"] = md.get("cluster_id")
        result["controller_id"] = md.get("controller_id")
        result["brokers"] = sorted(({"id": b["node_id"], "host": b["host"], "port": b["port"]}
                                    for b in md["brokers"]), key=lambda b: b["id"])
        topics = {}
        for t in md["topics"]:
            parts = sorted(t["partitions"] or [], key=lambda p: p["partition"])
            topics[t["topic"]] = {
                "partitions": len(parts),
                "error": code_text(t["error_code"]),
                "leaders": {str(p["partition"]): p["leader"] for p in parts},
                "replicas": {str(p["partition"]): list(p["replicas"] or []) for p in parts},
                "isrs": {str(p["partition"]): list(p["isr"] or []) for p in parts},
            }
        result["topics"] = topics
        if a.topic:
            if topics.get(a.topic, {}).get("error"):
                result["error"] = topics[a.topic]["error"]
            result["configs"], result["configs_error"] = {}, None
            try:
                res = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, a.topic)])
                configs = {}
                for resp in res:
                    for r in resp.to_object()["resources"]:
                        if r["error_code"]:
                            raise RuntimeError(code_text(r["error_code"], r.get("error_message")))
                        for e in r["config_entries"] or []:
                            configs[e["config_names"]] = e["config_value"]
                result["configs"] = dict(sorted(configs.items()))
            except RuntimeError as e:
                result["configs_error"] = str(e)
            except Exception as e:  # noqa: BLE001
                result["configs_error"] = err_text(e)

    elif a.op == "offsets":
        result["earliest"], result["latest"] = {}, {}
        try:
            md = await metadata(admin, [a.topic])
            t = next((t for t in md["topics"] if t["topic"] == a.topic), None)
            if t is None or t["error_code"]:
                raise RuntimeError(code_text(t["error_code"]) if t else "UNKNOWN_TOPIC_OR_PARTITION: not in metadata")
            by_leader = {}
            for p in t["partitions"]:
                if p["error_code"]:
                    raise RuntimeError(code_text(p["error_code"]))
                by_leader.setdefault(p["leader"], []).append(p["partition"])
            for ts, key in ((-2, "earliest"), (-1, "latest")):
                for leader, parts in sorted(by_leader.items()):
                    req = OffsetRequest(-1, 0, [(a.topic, [(p, ts) for p in sorted(parts)])])
                    resp = (await admin._send_request_to_node(leader, req)).to_object()
                    for rt in resp["topics"]:
                        for rp in rt["partitions"]:
                            if rp["error_code"]:
                                raise RuntimeError(code_text(rp["error_code"]))
                            result[key][str(rp["partition"])] = rp["offset"]
        except RuntimeError as e:
            result["error"] = str(e)
        except Exception as e:  # noqa: BLE001
            result["error"] = err_text(e)

    if admin is not None:
        await wait_for(admin.close(), 5)
    result["ok"] = result["error"] is None
    ok = result["ok"] or a.allow_error
    return result, ok, None if ok else "ak_client admin %s: %s" % (a.op, result["error"])


# --- main --------------------------------------------------------------------------

def version():
    from aiokafka import codec
    try:
        import cramjam
        cj = "cramjam %s" % getattr(cramjam, "__version__", "?")
    except ImportError:
        cj = None
    parts = ["gzip: built in"]
    for name, has in (("snappy", codec.has_snappy), ("lz4", codec.has_lz4), ("zstd", codec.has_zstd)):
        parts.append("%s: %s" % (name, (cj or "available") if has() else "unavailable (no cramjam)"))
    print("%s (python %s; %s)" % (CLIENT, sys.version.split()[0], "; ".join(parts)))
    sys.stdout.flush()
    sys.exit(0)


def parser():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", metavar="produce|consume|admin|version")
    sub.required = True
    x_help = "extra aiokafka keyword argument (repeatable)"

    p = sub.add_parser("produce", help="produce --count records")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--start", type=int, default=0, help="index of the first record (default 0)")
    p.add_argument("--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    p.add_argument("--acks", default="all", choices=["0", "1", "all", "-1"])
    p.add_argument("--idempotent", action="store_true")
    p.add_argument("--keyed", action="store_true", help="key = k{i %% 16}")
    p.add_argument("--partition", type=int, default=None, help="produce to this partition only")
    p.add_argument("--value-size", type=int, default=0, help="pad values with '.' to this many bytes")
    p.add_argument("--value-prefix", default=None, help="value prefix (default: the compression name)")
    p.add_argument("--linger-ms", type=int, default=5)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for deliveries")
    p.add_argument("-X", dest="extra", action="append", default=[], metavar="KEY=VALUE", help=x_help)

    c = sub.add_parser("consume", help="consume until --expect records")
    c.add_argument("--bootstrap", required=True)
    c.add_argument("--topic", required=True)
    c.add_argument("--group", help="group id (required unless --assign)")
    c.add_argument("--expect", type=int, required=True)
    c.add_argument("--timeout", type=float, default=60.0)
    c.add_argument("--members", type=int, default=1)
    c.add_argument("--commit", action="store_true")
    c.add_argument("--linger", type=float, default=0.0,
                   help="keep consuming this many seconds after N were seen (to catch extras)")
    c.add_argument("--records", action="store_true", help="include every record in the JSON")
    c.add_argument("--assign", action="store_true",
                   help="no group: one consumer assigns every partition from the beginning")
    c.add_argument("-X", dest="extra", action="append", default=[], metavar="KEY=VALUE", help=x_help)

    d = sub.add_parser("admin", help="create|describe|delete|offsets")
    d.add_argument("--bootstrap", required=True)
    d.add_argument("op", choices=["create", "describe", "delete", "offsets"])
    d.add_argument("--topic")
    d.add_argument("--partitions", type=int, default=8)
    d.add_argument("--replication-factor", type=int, default=1)
    d.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="topic config for create (repeatable)")
    d.add_argument("--timeout", type=float, default=30.0)
    d.add_argument("--allow-error", action="store_true", help="exit 0 even if the operation failed")
    d.add_argument("-X", dest="extra", action="append", default=[], metavar="KEY=VALUE", help=x_help)

    sub.add_parser("version", help="aiokafka and codec versions, one line")
    return ap, {"produce": p, "consume": c, "admin": d}


def main(t0):
    ap, subs = parser()
    a = ap.parse_args()
    level = os.environ.get("AK_CLIENT_LOG", "WARNING").upper()
    logging.basicConfig(stream=sys.stderr, level=getattr(logging, level, logging.WARNING),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if a.command == "version":
        version()
    if a.command == "produce":
        if a.count < 0:
            subs["produce"].error("--count must be >= 0")
        if a.idempotent and a.acks not in ("all", "-1"):
            subs["produce"].error("--idempotent needs --acks all (aiokafka refuses idempotence otherwise)")
        coro = produce(a, t0)
    elif a.command == "consume":
        if a.assign:
            a.members, a.commit = 1, False
        elif not a.group:
            subs["consume"].error("--group is required unless --assign")
        if a.members < 1:
            subs["consume"].error("--members must be >= 1")
        coro = consume(a, t0)
    else:
        if a.op != "describe" and not a.topic:
            subs["admin"].error("%s needs --topic" % a.op)
        coro = admin_op(a, t0)
    result, ok, message = asyncio.run(coro)
    emit(result, ok, message)


if __name__ == "__main__":
    run(main)
