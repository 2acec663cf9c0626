// The Sarama client (github.com/Shopify/sarama 1.22.1, Debian's
// golang-github-shopify-sarama-dev; the same file also builds against the
// current Sarama, github.com/IBM/sarama 1.61.1: see "The current Sarama"
// below), driven from the Rust integration tests
// like the Python scripts, JavaClient.java and kafkajs/client.js beside it:
// the same flags and the same JSON shapes (see ../README.md), one JSON object
// (sorted keys, Python's separators) on the last stdout line; exit 0 done,
// 1 fell short (JSON still printed), 2 bad arguments, 3 crash (stack on
// stderr).
//
//	BINARY produce --bootstrap B --topic T --count N [--start S]
//	    [--compression none|gzip|snappy|lz4|zstd] [--acks 0|1|all]
//	    [--idempotent | --no-idempotent] [--keyed] [--partition P]
//	    [--value-size N] [--value-prefix P] [--linger-ms MS] [--timeout S]
//	BINARY consume --bootstrap B --topic T --expect N
//	    (--group G [--members M] [--commit] | --assign)
//	    [--linger S] [--records] [--timeout S]
//	BINARY admin --bootstrap B create|describe|delete|offsets
//	    [--topic T] [--partitions P] [--replication-factor R]
//	    [--config k=v ...] [--timeout S] [--allow-error]
//	BINARY version      (sarama, Go and protocol version, one line)
//
// Every command also takes --kafka-version V (the Kafka version sarama
// assumes, default 2.2.0, the newest sarama 1.22.1 knows, 4.1.0 in the
// current build; e.g. 1.0.0 or 0.11.0.2) and -X key=value (repeatable):
//
//	version=V               same as --kafka-version
//	log=true                sarama's own log on stderr (also SARAMA_LOG=1)
//	client.id=ID            Config.ClientID
//	max.open.requests=N     Config.Net.MaxOpenRequests
//	metadata.full=BOOL      Config.Metadata.Full
//	partitioner=hash|reference|roundrobin|random   (produce, keyed records)
//	balance=range|roundrobin                      (consume, group strategy)
//	session.timeout.ms / heartbeat.interval.ms / rebalance.timeout.ms /
//	commit.interval.ms / fetch.max.wait.ms         (consume)
//
// Build (GOPATH mode, no module proxy needed; Debian's golang-go 1.19 and
// golang-github-shopify-sarama-dev; cgo for zstd via system libzstd):
//
//	GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE=/tmp/gocache \
//	CGO_CFLAGS=-Wno-deprecated-declarations \
//	  go build -o OUT tests/clients/sarama/main.go
//
// Protocol versions this client makes sarama 1.22.1 send at Version 2.2.0
// (sarama sends no ApiVersions request and picks versions from
// Config.Version alone): Metadata v5, Produce v3 (record batches v2, every
// codec, zstd too), Fetch v4, ListOffsets v1, FindCoordinator v0,
// JoinGroup v1, SyncGroup v0, Heartbeat v0, LeaveGroup v0, OffsetCommit v2,
// OffsetFetch v1, InitProducerId v0, CreateTopics v2, DeleteTopics v1,
// DescribeConfigs v1. Two of them are this client's choice: sarama's own
// defaults, OffsetCommit v1 (Consumer.Offsets.Retention 0) and
// DescribeConfigs v0 (ClusterAdmin.DescribeConfig), are versions Kafka 4
// dropped (KIP-896) and Strait closes the connection on them. With an older
// --kafka-version: 1.0.0 works except describe's configs (DescribeConfigs v1
// needs 1.1.0 in sarama); 0.11.x produces and consumes but cannot create
// topics (CreateTopics v1); 0.10.x and older cannot produce or fetch
// (Produce v2, Fetch v3).
//
// sarama 1.22 leaves a produced batch's max timestamp at -1 (Kafka's broker
// rewrites it from the records when it validates the batch).
//
// The current Sarama: ../sarama-current holds a go.mod (module
// strait-tests/sarama-current, github.com/IBM/sarama v1.61.1; Go 1.26+),
// its go.sum and current.go, which replaces this file's build-specific
// defaults (see "What differs between the two builds") in its init().
// ../sarama-current/build.sh copies the three files and this one, its
// sarama import rewritten to github.com/IBM/sarama, into a temporary
// directory and builds there (module mode, no cgo: zstd is
// klauspost/compress); caches in .peers/go, never $HOME:
//
//	tests/clients/sarama-current/build.sh download    # go mod download
//	tests/clients/sarama-current/build.sh OUT         # go build (offline)
//
// It sends ApiVersions v4 (v3 below --kafka-version 3.9.0) first on every
// connection and lowers every request to the broker's advertised maximum,
// never raises one to its minimum: an old --kafka-version still sends what
// Kafka 4 dropped (at 1.0.0 describe's DescribeConfigs v0: the connection
// is closed). At its default 4.1.0 against Kafka 4.1.1: Metadata v11,
// Produce v10 (zstd works), Fetch v12, ListOffsets v6, FindCoordinator v3,
// JoinGroup v8 (the classic group protocol; sarama has no KIP-848),
// SyncGroup v5, Heartbeat v4, LeaveGroup v5, OffsetCommit v8,
// OffsetFetch v8, InitProducerId v4, CreateTopics v7, DeleteTopics v6,
// DescribeConfigs v4 (the versions named below are 1.22's). At 2.8.0
// (sarama's DefaultVersion) Produce v9, JoinGroup v7, LeaveGroup v4,
// OffsetFetch v7 and ApiVersions v3, the rest the same. It sets a batch's
// max timestamp; its client errors wrap their causes ("SARAMA_OUT_OF_BROKERS:
// kafka: client has run out of available brokers to talk to: dial tcp
// ...: connection refused"); Consumer.Group.Rebalance.Strategy, which this
// client sets, is deprecated there (a warning on -X log=true, still obeyed).
//
// How it differs from the librdkafka scripts, because sarama works so:
//   - produce: an AsyncProducer with Return.Successes and Return.Errors, so
//     every record's partition and offset come back one by one (acks=0: no
//     offsets, sarama reports success once the request is written).
//     Partitioner: keyed records use sarama's NewHashPartitioner (FNV-1a of
//     the key modulo the partition count, NOT Java's murmur2: the same key can
//     land on another partition than with Java/librdkafka/kafkajs); unkeyed
//     records go round robin (sarama's hash partitioner would pick randomly);
//     --partition P uses NewManualPartitioner. --linger-ms sets
//     Producer.Flush.Frequency. --idempotent sets Producer.Idempotent with
//     Net.MaxOpenRequests=1 and acks=all (other --acks: exit 2); without it the
//     producer is not idempotent (--no-idempotent is accepted, a no-op).
//     Codecs: gzip (compress/gzip), snappy (golang/snappy), lz4 (pierrec/lz4),
//     zstd (DataDog/zstd, cgo). sarama sends zstd batches in Produce v3 (Kafka
//     wants v7+ and answers UNSUPPORTED_COMPRESSION_TYPE) and fetches them with
//     Fetch v4 (Kafka wants v10+). The current build: klauspost/compress,
//     and zstd in Produce v10 and Fetch v12.
//   - consume: each member is a sarama.ConsumerGroup (its own client) looping
//     on Consume(); initial offset oldest. With --commit every consumed record
//     is marked (MarkMessage); sarama's offset manager commits marks every
//     100 ms and once more when a session ends, i.e. when a rebalance is
//     announced (heartbeat answers REBALANCE_IN_PROGRESS) before the member
//     rejoins, and at the end. Without --commit nothing is marked or committed.
//     --assign: a plain sarama.Consumer, ConsumePartition(oldest) for every
//     partition, no group. --expect 0 counts as reached at the start (then
//     --linger applies), as in the kafkajs client. "committed" comes from
//     ClusterAdmin.ListConsumerGroupOffsets (OffsetFetch v1) after the members
//     stopped. sarama asks for a subscribed topic's metadata with
//     AllowAutoTopicCreation=true: a broker that auto-creates topics creates
//     a missing one (librdkafka's consumer does not ask for that).
//   - admin: ClusterAdmin for create (CreateTopics v2) and delete; describe
//     sends its own Metadata v5 request with AllowAutoTopicCreation=false (so
//     it never creates the topic; sarama's own DescribeCluster uses Metadata v0,
//     without controller or cluster id) and its own DescribeConfigs v1 (to keep
//     the error code: ClusterAdmin.DescribeConfig drops it). offsets: client.GetOffset (ListOffsets v1) per partition
//     after the same Metadata check. Errors read "KAFKA_ERROR_NAME: message",
//     the name from the Kafka error code (sarama's KError has no names);
//     client-side sarama errors read "SARAMA_...: message".
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/ioutil"
	"log"
	"math"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Shopify/sarama"
)

// What differs between the two builds: these are the Debian 1.22.1 build's;
// ../sarama-current/current.go, compiled only into the build against the
// current github.com/IBM/sarama, replaces them in its init().
var (
	saramaVersion       = "1.22.1" // Debian's golang-github-shopify-sarama-dev 1.22.1-1
	defaultKafkaVersion = "2.2.0"  // the newest Kafka version sarama 1.22.1 knows
	codecs              = "gzip, snappy, lz4, zstd (cgo)"
	// The versions of the Metadata and DescribeConfigs requests that
	// describe and offsets build themselves (see topicMetadata, describe).
	metadataVersion = func(v sarama.KafkaVersion) int16 {
		switch {
		case v.IsAtLeast(sarama.V1_0_0_0):
			return 5
		case v.IsAtLeast(sarama.V0_11_0_0):
			return 4
		case v.IsAtLeast(sarama.V0_10_1_0):
			return 2 // cluster id from v2 on; may auto-create (no flag before v4)
		case v.IsAtLeast(sarama.V0_10_0_0):
			return 1
		}
		return 0
	}
	describeConfigsVersion = func(v sarama.KafkaVersion) int16 {
		if v.IsAtLeast(sarama.V1_1_0_0) {
			// v0 (what sarama's ClusterAdmin.DescribeConfig sends) is gone
			// from Kafka 4 (KIP-896) and Strait: the broker closes the connection.
			return 1
		}
		return 0
	}
	// How often a member's marked offsets are committed (the current sarama
	// ignores Consumer.Offsets.CommitInterval: Consumer.Offsets.AutoCommit).
	setCommitInterval = func(c *sarama.Config, d time.Duration) { c.Consumer.Offsets.CommitInterval = d }
)

var t0 = time.Now()

func elapsed() float64 { return math.Round(time.Since(t0).Seconds()*1000) / 1000 }

// --- arguments -------------------------------------------------------------------

type usageError string

func usage(format string, a ...interface{}) { panic(usageError(fmt.Sprintf(format, a...))) }

const usageText = `usage:
  BINARY produce --bootstrap B --topic T --count N [--start S]
      [--compression none|gzip|snappy|lz4|zstd] [--acks 0|1|all]
      [--idempotent | --no-idempotent] [--keyed] [--partition P]
      [--value-size N] [--value-prefix P] [--linger-ms MS] [--timeout S]
  BINARY consume --bootstrap B --topic T --expect N
      (--group G [--members M] [--commit] | --assign)
      [--linger S] [--records] [--timeout S]
  BINARY admin --bootstrap B create|describe|delete|offsets
      [--topic T] [--partitions P] [--replication-factor R]
      [--config k=v ...] [--timeout S] [--allow-error]
  BINARY version
  every command: --kafka-version V (default %s), -X key=value (see the source header)`

var flagNames = map[string][]string{
	"produce": {"--idempotent", "--no-idempotent", "--keyed"},
	"consume": {"--assign", "--commit", "--records"},
	"admin":   {"--allow-error"},
}

var valueNames = map[string][]string{
	"produce": {"--bootstrap", "--topic", "--count", "--start", "--compression", "--acks", "--partition",
		"--value-size", "--value-prefix", "--linger-ms", "--timeout", "--kafka-version"},
	"consume": {"--bootstrap", "--topic", "--group", "--expect", "--timeout", "--members", "--linger", "--kafka-version"},
	"admin":   {"--bootstrap", "--topic", "--partitions", "--replication-factor", "--timeout", "--kafka-version"},
}

var repeatedNames = map[string][]string{"admin": {"--config"}}

type args struct {
	values     map[string]string
	flags      map[string]bool
	repeated   map[string][]string
	positional []string
	extra      map[string]string
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func parseArgs(command string, argv []string) *args {
	a := &args{values: map[string]string{}, flags: map[string]bool{}, repeated: map[string][]string{}, extra: map[string]string{}}
	for i := 0; i < len(argv); i++ {
		name := argv[i]
		inline, hasInline := "", false
		if strings.HasPrefix(name, "--") && strings.Contains(name, "=") {
			eq := strings.Index(name, "=")
			inline, hasInline = name[eq+1:], true
			name = name[:eq]
		}
		next := func() string {
			if hasInline {
				return inline
			}
			if i+1 >= len(argv) {
				usage("%s needs a value", name)
			}
			i++
			return argv[i]
		}
		switch {
		case name == "-h" || name == "--help":
			fmt.Printf(usageText+"\n", defaultKafkaVersion)
			os.Exit(0)
		case name == "-X":
			a.addExtra(next())
		case strings.HasPrefix(name, "-X") && len(name) > 2:
			a.addExtra(name[2:])
		case contains(flagNames[command], name):
			if hasInline {
				usage("%s takes no value", name)
			}
			a.flags[name] = true
		case contains(valueNames[command], name):
			a.values[name] = next()
		case contains(repeatedNames[command], name):
			a.repeated[name] = append(a.repeated[name], next())
		case strings.HasPrefix(name, "-") && name != "-":
			usage("unknown option %s for %s", name, command)
		default:
			a.positional = append(a.positional, name)
		}
	}
	return a
}

var extraKeys = []string{"version", "log", "client.id", "max.open.requests", "metadata.full", "partitioner",
	"balance", "session.timeout.ms", "heartbeat.interval.ms", "rebalance.timeout.ms", "commit.interval.ms",
	"fetch.max.wait.ms"}

func (a *args) addExtra(kv string) {
	eq := strings.Index(kv, "=")
	if eq < 0 {
		usage("bad -X option %s: expected key=value", kv)
	}
	if !contains(extraKeys, kv[:eq]) {
		usage("unknown -X option %s (known: %s)", kv[:eq], strings.Join(extraKeys, ", "))
	}
	a.extra[kv[:eq]] = kv[eq+1:]
}

func (a *args) get(name string, dflt *string) string {
	v, ok := a.values[name]
	if !ok {
		if dflt == nil {
			usage("%s is required", name)
		}
		return *dflt
	}
	return v
}

func str(s string) *string { return &s }

func (a *args) has(flag string) bool { return a.flags[flag] }

func (a *args) int(name string, dflt *int64) int64 {
	v, ok := a.values[name]
	if !ok {
		if dflt == nil {
			usage("%s is required", name)
		}
		return *dflt
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		usage("%s: not an integer: %s", name, v)
	}
	return n
}

func i64(n int64) *int64 { return &n }

func (a *args) secs(name string, dflt float64) float64 {
	v, ok := a.values[name]
	if !ok {
		return dflt
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		usage("%s: not a number: %s", name, v)
	}
	return f
}

func (a *args) choice(name, dflt string, choices []string) string {
	v := a.get(name, &dflt)
	if !contains(choices, v) {
		usage("%s: '%s' is not one of %s", name, v, strings.Join(choices, ", "))
	}
	return v
}

func (a *args) extraInt(key string, dflt int64) int64 {
	v, ok := a.extra[key]
	if !ok {
		return dflt
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		usage("-X %s: not an integer: %s", key, v)
	}
	return n
}

func (a *args) extraMs(key string, dflt time.Duration) time.Duration {
	return time.Duration(a.extraInt(key, int64(dflt/time.Millisecond))) * time.Millisecond
}

func (a *args) extraBool(key string, dflt bool) bool {
	v, ok := a.extra[key]
	if !ok {
		return dflt
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		usage("-X %s: not a boolean: %s", key, v)
	}
	return b
}

func (a *args) bootstrap() []string {
	var out []string
	for _, s := range strings.Split(a.get("--bootstrap", nil), ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		usage("--bootstrap is empty")
	}
	return out
}

// --- JSON output -------------------------------------------------------------------

// pyjson writes v like Python's json.dumps(sort_keys=True): sorted keys,
// ", " and ": " separators, non-ASCII escaped.
func pyjson(b *strings.Builder, v interface{}) {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if x {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case int:
		b.WriteString(strconv.FormatInt(int64(x), 10))
	case int32:
		b.WriteString(strconv.FormatInt(int64(x), 10))
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			b.WriteString("null")
			return
		}
		s := strconv.FormatFloat(x, 'f', -1, 64)
		if !strings.ContainsAny(s, ".e") {
			s += ".0"
		}
		b.WriteString(s)
	case string:
		b.WriteByte('"')
		for _, r := range x {
			switch {
			case r == '"':
				b.WriteString(`\"`)
			case r == '\\':
				b.WriteString(`\\`)
			case r == '\n':
				b.WriteString(`\n`)
			case r == '\r':
				b.WriteString(`\r`)
			case r == '\t':
				b.WriteString(`\t`)
			case r < 0x20 || (r >= 0x7f && r < 0x10000):
				fmt.Fprintf(b, `\u%04x`, r)
			case r >= 0x10000:
				r -= 0x10000
				fmt.Fprintf(b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
			default:
				b.WriteRune(r)
			}
		}
		b.WriteByte('"')
	case []interface{}:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			pyjson(b, e)
		}
		b.WriteByte(']')
	case []string:
		l := make([]interface{}, len(x))
		for i, e := range x {
			l[i] = e
		}
		pyjson(b, l)
	case []int32:
		l := make([]interface{}, len(x))
		for i, e := range x {
			l[i] = e
		}
		pyjson(b, l)
	case map[string]interface{}:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			pyjson(b, k)
			b.WriteString(": ")
			pyjson(b, x[k])
		}
		b.WriteByte('}')
	default:
		// Anything else through encoding/json (numbers of other widths, ...).
		raw, err := json.Marshal(x)
		if err != nil {
			pyjson(b, fmt.Sprint(x))
			return
		}
		b.Write(raw)
	}
}

// emit prints the result as the last stdout line and exits (0 if ok, else 1).
func emit(result map[string]interface{}, ok bool, message string) {
	if message != "" {
		fmt.Fprintln(os.Stderr, message)
	}
	var b strings.Builder
	pyjson(&b, result)
	b.WriteByte('\n')
	os.Stdout.WriteString(b.String())
	if ok {
		os.Exit(0)
	}
	os.Exit(1)
}

// --- shared helpers ------------------------------------------------------------------

func valueFor(prefix string, i int64, size int64) string {
	v := fmt.Sprintf("%s-%d", prefix, i)
	if size > 0 && int64(len(v)) < size {
		v += strings.Repeat(".", int(size)-len(v))
	}
	return v
}

// valuesSha is the sha256 over the sorted, de-duplicated values joined by
// newlines (byte order of UTF-8 = Python's code point order).
func valuesSha(values []string) string {
	set := map[string]bool{}
	for _, v := range values {
		set[v] = true
	}
	sorted := make([]string, 0, len(set))
	for v := range set {
		sorted = append(sorted, v)
	}
	sort.Strings(sorted)
	sum := sha256.Sum256([]byte(strings.Join(sorted, "\n")))
	return hex.EncodeToString(sum[:])
}

func topErrors(errs []string) []interface{} {
	set := map[string]bool{}
	for _, e := range errs {
		set[e] = true
	}
	sorted := make([]string, 0, len(set))
	for e := range set {
		sorted = append(sorted, e)
	}
	sort.Strings(sorted)
	if len(sorted) > 20 {
		sorted = sorted[:20]
	}
	out := make([]interface{}, len(sorted))
	for i, e := range sorted {
		out[i] = e
	}
	return out
}

func addOffset(offsets map[string]interface{}, partition int32, offset int64) {
	k := strconv.Itoa(int(partition))
	if cur, ok := offsets[k].([]interface{}); ok {
		lo, hi := cur[0].(int64), cur[1].(int64)
		if offset < lo {
			lo = offset
		}
		if offset > hi {
			hi = offset
		}
		offsets[k] = []interface{}{lo, hi}
	} else {
		offsets[k] = []interface{}{offset, offset}
	}
}

func incr(m map[string]interface{}, partition int32) {
	k := strconv.Itoa(int(partition))
	n, _ := m[k].(int64)
	m[k] = n + 1
}

// withTimeout runs f and waits at most d for it; false if it did not finish.
func withTimeout(d time.Duration, f func()) bool {
	done := make(chan struct{})
	go func() {
		defer crashOnPanic()
		f()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

func crashOnPanic() {
	if r := recover(); r != nil {
		crash(r)
	}
}

func crash(r interface{}) {
	fmt.Fprintf(os.Stderr, "sarama client: crashed: %v\n%s", r, debug.Stack())
	os.Exit(3)
}

// --- Kafka error names -----------------------------------------------------------------

// Kafka's error names by code (org.apache.kafka.common.protocol.Errors).
var kafkaErrorNames = map[int16]string{
	-1: "UNKNOWN_SERVER_ERROR", 0: "NONE", 1: "OFFSET_OUT_OF_RANGE", 2: "CORRUPT_MESSAGE",
	3: "UNKNOWN_TOPIC_OR_PARTITION", 4: "INVALID_FETCH_SIZE", 5: "LEADER_NOT_AVAILABLE",
	6: "NOT_LEADER_OR_FOLLOWER", 7: "REQUEST_TIMED_OUT", 8: "BROKER_NOT_AVAILABLE",
	9: "REPLICA_NOT_AVAILABLE", 10: "MESSAGE_TOO_LARGE", 11: "STALE_CONTROLLER_EPOCH",
	12: "OFFSET_METADATA_TOO_LARGE", 13: "NETWORK_EXCEPTION", 14: "COORDINATOR_LOAD_IN_PROGRESS",
	15: "COORDINATOR_NOT_AVAILABLE", 16: "NOT_COORDINATOR", 17: "INVALID_TOPIC_EXCEPTION",
	18: "RECORD_LIST_TOO_LARGE", 19: "NOT_ENOUGH_REPLICAS", 20: "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
	21: "INVALID_REQUIRED_ACKS", 22: "ILLEGAL_GENERATION", 23: "INCONSISTENT_GROUP_PROTOCOL",
	24: "INVALID_GROUP_ID", 25: "UNKNOWN_MEMBER_ID", 26: "INVALID_SESSION_TIMEOUT",
	27: "REBALANCE_IN_PROGRESS", 28: "INVALID_COMMIT_OFFSET_SIZE", 29: "TOPIC_AUTHORIZATION_FAILED",
	30: "GROUP_AUTHORIZATION_FAILED", 31: "CLUSTER_AUTHORIZATION_FAILED", 32: "INVALID_TIMESTAMP",
	33: "UNSUPPORTED_SASL_MECHANISM", 34: "ILLEGAL_SASL_STATE", 35: "UNSUPPORTED_VERSION",
	36: "TOPIC_ALREADY_EXISTS", 37: "INVALID_PARTITIONS", 38: "INVALID_REPLICATION_FACTOR",
	39: "INVALID_REPLICA_ASSIGNMENT", 40: "INVALID_CONFIG", 41: "NOT_CONTROLLER", 42: "INVALID_REQUEST",
	43: "UNSUPPORTED_FOR_MESSAGE_FORMAT", 44: "POLICY_VIOLATION", 45: "OUT_OF_ORDER_SEQUENCE_NUMBER",
	46: "DUPLICATE_SEQUENCE_NUMBER", 47: "INVALID_PRODUCER_EPOCH", 48: "INVALID_TXN_STATE",
	49: "INVALID_PRODUCER_ID_MAPPING", 50: "INVALID_TRANSACTION_TIMEOUT", 51: "CONCURRENT_TRANSACTIONS",
	52: "TRANSACTION_COORDINATOR_FENCED", 53: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
	54: "SECURITY_DISABLED", 55: "OPERATION_NOT_ATTEMPTED", 56: "KAFKA_STORAGE_ERROR",
	57: "LOG_DIR_NOT_FOUND", 58: "SASL_AUTHENTICATION_FAILED", 59: "UNKNOWN_PRODUCER_ID",
	60: "REASSIGNMENT_IN_PROGRESS", 61: "DELEGATION_TOKEN_AUTH_DISABLED", 62: "DELEGATION_TOKEN_NOT_FOUND",
	63: "DELEGATION_TOKEN_OWNER_MISMATCH", 64: "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED",
	65: "DELEGATION_TOKEN_AUTHORIZATION_FAILED", 66: "DELEGATION_TOKEN_EXPIRED",
	67: "INVALID_PRINCIPAL_TYPE", 68: "NON_EMPTY_GROUP", 69: "GROUP_ID_NOT_FOUND",
	70: "FETCH_SESSION_ID_NOT_FOUND", 71: "INVALID_FETCH_SESSION_EPOCH", 72: "LISTENER_NOT_FOUND",
	73: "TOPIC_DELETION_DISABLED", 74: "FENCED_LEADER_EPOCH", 75: "UNKNOWN_LEADER_EPOCH",
	76: "UNSUPPORTED_COMPRESSION_TYPE", 77: "STALE_BROKER_EPOCH", 78: "OFFSET_NOT_AVAILABLE",
	79: "MEMBER_ID_REQUIRED", 80: "PREFERRED_LEADER_NOT_AVAILABLE", 81: "GROUP_MAX_SIZE_REACHED",
	82: "FENCED_INSTANCE_ID", 83: "ELIGIBLE_LEADERS_NOT_AVAILABLE", 84: "ELECTION_NOT_NEEDED",
	85: "NO_REASSIGNMENT_IN_PROGRESS", 86: "GROUP_SUBSCRIBED_TO_TOPIC", 87: "INVALID_RECORD",
	88: "UNSTABLE_OFFSET_COMMIT", 89: "THROTTLING_QUOTA_EXCEEDED", 90: "PRODUCER_FENCED",
	91: "RESOURCE_NOT_FOUND", 92: "DUPLICATE_RESOURCE", 93: "UNACCEPTABLE_CREDENTIAL",
	94: "INCONSISTENT_VOTER_SET", 95: "INVALID_UPDATE_VERSION", 96: "FEATURE_UPDATE_FAILED",
	97: "PRINCIPAL_DESERIALIZATION_FAILURE", 98: "SNAPSHOT_NOT_FOUND", 99: "POSITION_OUT_OF_RANGE",
	100: "UNKNOWN_TOPIC_ID", 101: "DUPLICATE_BROKER_REGISTRATION", 102: "BROKER_ID_NOT_REGISTERED",
	103: "INCONSISTENT_TOPIC_ID", 104: "INCONSISTENT_CLUSTER_ID", 105: "TRANSACTIONAL_ID_NOT_FOUND",
	106: "FETCH_SESSION_TOPIC_ID_ERROR", 107: "INELIGIBLE_REPLICA", 108: "NEW_LEADER_ELECTED",
}

func kafkaName(code int16) string {
	if n, ok := kafkaErrorNames[code]; ok {
		return n
	}
	return fmt.Sprintf("KERROR_%d", code)
}

// kerrText is "NAME: message" for a Kafka error code (message: the broker's
// when it sent one, else sarama's text).
func kerrText(code sarama.KError, brokerMsg string) string {
	msg := brokerMsg
	if msg == "" {
		msg = code.Error()
	}
	return kafkaName(int16(code)) + ": " + msg
}

var saramaErrorNames = map[error]string{
	sarama.ErrOutOfBrokers:              "SARAMA_OUT_OF_BROKERS",
	sarama.ErrClosedClient:              "SARAMA_CLOSED_CLIENT",
	sarama.ErrIncompleteResponse:        "SARAMA_INCOMPLETE_RESPONSE",
	sarama.ErrInvalidPartition:          "SARAMA_INVALID_PARTITION",
	sarama.ErrAlreadyConnected:          "SARAMA_ALREADY_CONNECTED",
	sarama.ErrNotConnected:              "SARAMA_NOT_CONNECTED",
	sarama.ErrInsufficientData:          "SARAMA_INSUFFICIENT_DATA",
	sarama.ErrShuttingDown:              "SARAMA_SHUTTING_DOWN",
	sarama.ErrMessageTooLarge:           "SARAMA_MESSAGE_TOO_LARGE",
	sarama.ErrConsumerOffsetNotAdvanced: "SARAMA_CONSUMER_OFFSET_NOT_ADVANCED",
	sarama.ErrControllerNotAvailable:    "SARAMA_CONTROLLER_NOT_AVAILABLE",
	sarama.ErrNoTopicsToUpdateMetadata:  "SARAMA_NO_TOPICS_TO_UPDATE_METADATA",
	sarama.ErrClosedConsumerGroup:       "SARAMA_CLOSED_CONSUMER_GROUP",
}

// errText is "NAME: message": Kafka's error name for broker errors, a
// SARAMA_... name for errors of the client itself.
func errText(err error) string {
	switch e := err.(type) {
	case nil:
		return "NONE"
	case sarama.KError:
		return kerrText(e, "")
	case *sarama.TopicError:
		msg := ""
		if e.ErrMsg != nil {
			msg = *e.ErrMsg
		}
		return kerrText(e.Err, msg)
	case *sarama.ProducerError:
		return errText(e.Err)
	case *sarama.ConsumerError:
		return errText(e.Err)
	case sarama.ConsumerError:
		return errText(e.Err)
	case sarama.ConfigurationError:
		return "SARAMA_CONFIGURATION_ERROR: " + e.Error()
	case sarama.PacketEncodingError:
		return "SARAMA_PACKET_ENCODING_ERROR: " + e.Error()
	case sarama.PacketDecodingError:
		return "SARAMA_PACKET_DECODING_ERROR: " + e.Error()
	case net.Error:
		if e.Timeout() {
			return "SARAMA_NETWORK_TIMEOUT: " + e.Error()
		}
		return "SARAMA_NETWORK_ERROR: " + e.Error()
	}
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		// The broker closed the connection (e.g. on a request version it
		// does not accept).
		return "SARAMA_CONNECTION_CLOSED: " + err.Error() + " (the broker closed the connection)"
	}
	if n, ok := saramaErrorNames[err]; ok {
		return n + ": " + err.Error()
	}
	// The current sarama wraps errors (ErrOutOfBrokers with the dial
	// errors, ...): the same names for wrapped ones.
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "SARAMA_CONNECTION_CLOSED: " + err.Error() + " (the broker closed the connection)"
	}
	var names []string
	for e, n := range saramaErrorNames {
		if errors.Is(err, e) {
			names = append(names, n)
		}
	}
	if len(names) > 0 {
		sort.Strings(names)
		return names[0] + ": " + err.Error()
	}
	var kerr sarama.KError
	if errors.As(err, &kerr) {
		return kerrText(kerr, err.Error())
	}
	return "SARAMA_ERROR: " + err.Error()
}

// --- configuration ----------------------------------------------------------------------

func newConfig(a *args, clientID string) *sarama.Config {
	c := sarama.NewConfig()
	v := a.get("--kafka-version", str(defaultKafkaVersion))
	if x, ok := a.extra["version"]; ok {
		v = x
	}
	kv, err := sarama.ParseKafkaVersion(v)
	if err != nil {
		usage("--kafka-version: %v (e.g. 2.2.0, 1.0.0, 0.11.0.2)", err)
	}
	c.Version = kv
	c.ClientID = clientID
	if x, ok := a.extra["client.id"]; ok {
		c.ClientID = x
	}
	c.Net.MaxOpenRequests = int(a.extraInt("max.open.requests", int64(c.Net.MaxOpenRequests)))
	c.Metadata.Full = a.extraBool("metadata.full", c.Metadata.Full)
	c.Metadata.Retry.Max = 5
	c.Metadata.Retry.Backoff = 200 * time.Millisecond
	return c
}

// topicMetadata asks a broker for one topic's metadata (or every topic's,
// topic ""), with AllowAutoTopicCreation=false from v4 on: it never creates
// the topic (sarama's client asks with true for a named topic).
func topicMetadata(client sarama.Client, topic string) (*sarama.MetadataResponse, error) {
	req := &sarama.MetadataRequest{AllowAutoTopicCreation: false}
	if topic != "" {
		req.Topics = []string{topic}
	}
	req.Version = metadataVersion(client.Config().Version)
	var lastErr error = sarama.ErrOutOfBrokers
	brokers := []*sarama.Broker{}
	if c, err := client.Controller(); err == nil {
		brokers = append(brokers, c)
	}
	brokers = append(brokers, client.Brokers()...)
	for _, b := range brokers {
		_ = b.Open(client.Config())
		resp, err := b.GetMetadata(req)
		if err == nil {
			return resp, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func findTopic(md *sarama.MetadataResponse, topic string) *sarama.TopicMetadata {
	for _, t := range md.Topics {
		if t.Name == topic {
			return t
		}
	}
	return nil
}

func sortedPartitions(t *sarama.TopicMetadata) []*sarama.PartitionMetadata {
	parts := append([]*sarama.PartitionMetadata(nil), t.Partitions...)
	sort.Slice(parts, func(i, j int) bool { return parts[i].ID < parts[j].ID })
	return parts
}

// --- produce ---------------------------------------------------------------------------

// keyedPartitioner: sarama's hash partitioner (FNV-1a, or another one named
// with -X partitioner=) for keyed records, round robin for unkeyed ones.
func keyedPartitioner(kind string) sarama.PartitionerConstructor {
	var hashed sarama.PartitionerConstructor
	switch kind {
	case "hash":
		hashed = sarama.NewHashPartitioner
	case "reference":
		hashed = sarama.NewReferenceHashPartitioner
	case "roundrobin":
		return sarama.NewRoundRobinPartitioner
	case "random":
		return sarama.NewRandomPartitioner
	default:
		usage("-X partitioner=%s: one of hash, reference, roundrobin, random", kind)
	}
	return func(topic string) sarama.Partitioner {
		return &mixedPartitioner{hashed: hashed(topic), unkeyed: sarama.NewRoundRobinPartitioner(topic)}
	}
}

type mixedPartitioner struct {
	hashed, unkeyed sarama.Partitioner
}

func (p *mixedPartitioner) Partition(m *sarama.ProducerMessage, n int32) (int32, error) {
	if m.Key == nil {
		return p.unkeyed.Partition(m, n)
	}
	return p.hashed.Partition(m, n)
}

func (p *mixedPartitioner) RequiresConsistency() bool { return true }

func produce(a *args) {
	topic := a.get("--topic", nil)
	brokers := a.bootstrap()
	count := a.int("--count", nil)
	if count < 0 {
		usage("--count must be >= 0")
	}
	start := a.int("--start", i64(0))
	compression := a.choice("--compression", "none", []string{"none", "gzip", "snappy", "lz4", "zstd"})
	acks := a.choice("--acks", "all", []string{"0", "1", "all", "-1"})
	idempotent := a.has("--idempotent")
	keyed := a.has("--keyed")
	partition := int64(-1)
	if _, ok := a.values["--partition"]; ok {
		partition = a.int("--partition", nil)
		if partition < 0 {
			usage("--partition must be >= 0")
		}
	}
	size := a.int("--value-size", i64(0))
	prefix := a.get("--value-prefix", &compression)
	linger := a.int("--linger-ms", i64(5))
	timeout := a.secs("--timeout", 60)
	if idempotent && acks != "all" && acks != "-1" {
		usage("--idempotent needs --acks all (sarama requires RequiredAcks=WaitForAll for idempotence)")
	}

	cfg := newConfig(a, "sarama_produce")
	switch acks {
	case "0":
		cfg.Producer.RequiredAcks = sarama.NoResponse
	case "1":
		cfg.Producer.RequiredAcks = sarama.WaitForLocal
	default:
		cfg.Producer.RequiredAcks = sarama.WaitForAll
	}
	switch compression {
	case "gzip":
		cfg.Producer.Compression = sarama.CompressionGZIP
	case "snappy":
		cfg.Producer.Compression = sarama.CompressionSnappy
	case "lz4":
		cfg.Producer.Compression = sarama.CompressionLZ4
	case "zstd":
		cfg.Producer.Compression = sarama.CompressionZSTD
		if !cfg.Version.IsAtLeast(sarama.V2_1_0_0) {
			usage("zstd needs --kafka-version 2.1.0 or later (sarama's rule), not %s", cfg.Version)
		}
	}
	if partition >= 0 {
		cfg.Producer.Partitioner = sarama.NewManualPartitioner
	} else {
		kind := "hash"
		if x, ok := a.extra["partitioner"]; ok {
			kind = x
		}
		cfg.Producer.Partitioner = keyedPartitioner(kind)
	}
	if linger > 0 {
		cfg.Producer.Flush.Frequency = time.Duration(linger) * time.Millisecond
	}
	cfg.Producer.Return.Successes = true
	cfg.Producer.Return.Errors = true
	cfg.Producer.Retry.Max = 5
	cfg.Producer.Retry.Backoff = 200 * time.Millisecond
	cfg.Producer.Timeout = time.Duration(math.Max(1, math.Min(30, timeout)) * float64(time.Second))
	if idempotent {
		cfg.Producer.Idempotent = true
		cfg.Net.MaxOpenRequests = 1
		cfg.Producer.RequiredAcks = sarama.WaitForAll
		if !cfg.Version.IsAtLeast(sarama.V0_11_0_0) {
			usage("--idempotent needs --kafka-version 0.11.0.0 or later, not %s", cfg.Version)
		}
	}
	if err := cfg.Validate(); err != nil {
		usage("configuration: %v", err)
	}

	type delivery struct {
		partition int32
		offset    int64
		value     string
	}
	var delivered []delivery
	var errs []string
	deadline := time.Now().Add(time.Duration((timeout + 5) * float64(time.Second)))
	deadlineC := time.After(time.Until(deadline))

	success := func(m *sarama.ProducerMessage) {
		off := m.Offset
		if cfg.Producer.RequiredAcks == sarama.NoResponse {
			off = -1
		}
		delivered = append(delivered, delivery{m.Partition, off, m.Metadata.(string)})
	}
	failure := func(e *sarama.ProducerError) {
		errs = append(errs, errText(e.Err))
	}

	var producer sarama.AsyncProducer
	var connErr error
	if !withTimeout(time.Until(deadline), func() { producer, connErr = sarama.NewAsyncProducer(brokers, cfg) }) {
		connErr = fmt.Errorf("connect: timed out after %.0f s", timeout+5)
	}
	if connErr != nil {
		// Nothing was sent: every record failed.
		for i := int64(0); i < count; i++ {
			errs = append(errs, "connect: "+errText(connErr))
		}
	} else {
	send:
		for i := start; i < start+count; i++ {
			v := valueFor(prefix, i, size)
			m := &sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(v), Metadata: v}
			if keyed {
				m.Key = sarama.StringEncoder(fmt.Sprintf("k%d", i%16))
			}
			if partition >= 0 {
				m.Partition = int32(partition)
			}
			for sent := false; !sent; {
				select {
				case producer.Input() <- m:
					sent = true
				case s := <-producer.Successes():
					success(s)
				case e := <-producer.Errors():
					failure(e)
				case <-deadlineC:
					break send
				}
			}
		}
	wait:
		for int64(len(delivered)+len(errs)) < count {
			select {
			case s := <-producer.Successes():
				success(s)
			case e := <-producer.Errors():
				failure(e)
			case <-deadlineC:
				break wait
			}
		}
		// Close: flushes what is left and ends both channels.
		producer.AsyncClose()
		succ, fail := producer.Successes(), producer.Errors()
		closeBy := time.After(5 * time.Second)
	drain:
		for succ != nil || fail != nil {
			select {
			case s, ok := <-succ:
				if !ok {
					succ = nil
				} else {
					success(s)
				}
			case e, ok := <-fail:
				if !ok {
					fail = nil
				} else {
					failure(e)
				}
			case <-closeBy:
				break drain
			}
		}
	}

	partitions := map[string]interface{}{}
	offsets := map[string]interface{}{}
	values := make([]string, 0, len(delivered))
	for _, d := range delivered {
		incr(partitions, d.partition)
		if d.offset >= 0 {
			addOffset(offsets, d.partition, d.offset)
		}
		values = append(values, d.value)
	}
	undelivered := count - int64(len(delivered)) - int64(len(errs))
	if undelivered < 0 {
		undelivered = 0
	}
	result := map[string]interface{}{
		"delivered":   int64(len(delivered)),
		"count":       count,
		"undelivered": undelivered,
		"errors":      topErrors(errs),
		"error_count": int64(len(errs)),
		"partitions":  partitions,
		"offsets":     offsets,
		"values_sha":  valuesSha(values),
		"elapsed_s":   elapsed(),
		"client":      "sarama " + saramaVersion,
	}
	ok := int64(len(delivered)) == count
	msg := ""
	if !ok {
		top := topErrors(errs)
		if len(top) > 3 {
			top = top[:3]
		}
		msg = fmt.Sprintf("sarama produce: delivered %d of %d (%v)", len(delivered), count, top)
	}
	emit(result, ok, msg)
}

// --- consume ---------------------------------------------------------------------------

type record struct {
	partition int32
	offset    int64
	key       interface{} // string or nil
	value     interface{}
}

type consumeState struct {
	mu         sync.Mutex
	expect     int64
	seen       map[[2]int64]*record
	received   int64
	byMember   map[string]interface{}
	inOrder    bool
	violations []interface{}
	errs       []string
	done       bool
	reachedAt  time.Time
}

func (st *consumeState) addError(s string) {
	st.mu.Lock()
	st.errs = append(st.errs, s)
	st.mu.Unlock()
}

func bytesOrNil(b []byte) interface{} {
	if b == nil {
		return nil
	}
	return string(b)
}

// member's view: the last offset it saw per partition (order check) and its count.
type memberState struct {
	idx   int
	mu    sync.Mutex
	last  map[int32]int64
	count int64
}

// see records one delivered message; false once the run is done (the
// message is then neither counted nor marked).
func (st *consumeState) see(m *memberState, msg *sarama.ConsumerMessage) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.done {
		return false
	}
	m.mu.Lock()
	if prev, ok := m.last[msg.Partition]; ok && msg.Offset <= prev {
		st.inOrder = false
		if len(st.violations) < 10 {
			st.violations = append(st.violations, []interface{}{int64(msg.Partition), prev, msg.Offset})
		}
	}
	m.last[msg.Partition] = msg.Offset
	m.count++
	st.byMember[strconv.Itoa(m.idx)] = m.count
	m.mu.Unlock()
	st.received++
	k := [2]int64{int64(msg.Partition), msg.Offset}
	if _, ok := st.seen[k]; !ok {
		st.seen[k] = &record{msg.Partition, msg.Offset, bytesOrNil(msg.Key), bytesOrNil(msg.Value)}
	}
	if int64(len(st.seen)) >= st.expect && st.reachedAt.IsZero() {
		st.reachedAt = time.Now()
	}
	return true
}

type groupHandler struct {
	st     *consumeState
	m      *memberState
	commit bool
}

func (h *groupHandler) Setup(s sarama.ConsumerGroupSession) error {
	// A (re)assignment: a partition may start over from its commit.
	h.m.mu.Lock()
	for _, parts := range s.Claims() {
		for _, p := range parts {
			delete(h.m.last, p)
		}
	}
	h.m.mu.Unlock()
	return nil
}

func (h *groupHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h *groupHandler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for {
		select {
		case msg, ok := <-c.Messages():
			if !ok {
				return nil
			}
			if !h.st.see(h.m, msg) {
				return nil
			}
			if h.commit {
				s.MarkMessage(msg, "")
			}
		case <-s.Context().Done():
			return nil
		}
	}
}

func consume(a *args) {
	topic := a.get("--topic", nil)
	brokers := a.bootstrap()
	expect := a.int("--expect", nil)
	assign := a.has("--assign")
	_, hasGroup := a.values["--group"]
	if !assign && !hasGroup {
		usage("--group is required unless --assign")
	}
	group := a.get("--group", str(""))
	members := int64(1)
	if !assign {
		members = a.int("--members", i64(1))
		if members < 1 {
			usage("--members must be >= 1")
		}
	}
	commit := !assign && a.has("--commit")
	timeout := a.secs("--timeout", 60)
	linger := a.secs("--linger", 0)
	deadline := t0.Add(time.Duration(timeout * float64(time.Second)))

	st := &consumeState{expect: expect, seen: map[[2]int64]*record{}, byMember: map[string]interface{}{}, inOrder: true}
	if expect <= 0 {
		st.reachedAt = time.Now()
	}
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var closers []func()
	var closersMu sync.Mutex
	addCloser := func(f func()) {
		closersMu.Lock()
		closers = append(closers, f)
		closersMu.Unlock()
	}
	alive := int64(members)
	var aliveMu sync.Mutex
	memberDied := func() {
		aliveMu.Lock()
		alive--
		aliveMu.Unlock()
	}

	newMemberConfig := func(idx int) *sarama.Config {
		cfg := newConfig(a, fmt.Sprintf("sarama_consume-%d", idx))
		cfg.Consumer.Return.Errors = true
		cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
		setCommitInterval(cfg, a.extraMs("commit.interval.ms", 100*time.Millisecond))
		// Retention 0 makes sarama commit with OffsetCommit v1, which Kafka 4
		// (KIP-896) and Strait no longer accept (the connection is closed);
		// any other value selects v2, and -1 ms is v2's "broker default".
		cfg.Consumer.Offsets.Retention = -time.Millisecond
		cfg.Consumer.MaxWaitTime = a.extraMs("fetch.max.wait.ms", 250*time.Millisecond)
		cfg.Consumer.Group.Session.Timeout = a.extraMs("session.timeout.ms", 10*time.Second)
		cfg.Consumer.Group.Heartbeat.Interval = a.extraMs("heartbeat.interval.ms", time.Second)
		cfg.Consumer.Group.Rebalance.Timeout = a.extraMs("rebalance.timeout.ms", 20*time.Second)
		cfg.Consumer.Group.Rebalance.Retry.Max = 10
		cfg.Consumer.Group.Rebalance.Retry.Backoff = 500 * time.Millisecond
		switch b := a.extra["balance"]; b {
		case "", "range":
			cfg.Consumer.Group.Rebalance.Strategy = sarama.BalanceStrategyRange
		case "roundrobin":
			cfg.Consumer.Group.Rebalance.Strategy = sarama.BalanceStrategyRoundRobin
		default:
			usage("-X balance=%s: one of range, roundrobin", b)
		}
		if err := cfg.Validate(); err != nil {
			usage("configuration: %v", err)
		}
		return cfg
	}

	if assign {
		st.byMember["0"] = int64(0)
		cfg := newMemberConfig(0)
		m := &memberState{idx: 0, last: map[int32]int64{}}
		wg.Add(1)
		go func() {
			defer crashOnPanic()
			defer wg.Done()
			client, err := sarama.NewClient(brokers, cfg)
			if err != nil {
				st.addError("no partitions for " + topic + ": " + errText(err))
				memberDied()
				return
			}
			addCloser(func() { _ = client.Close() })
			md, err := topicMetadata(client, topic)
			var parts []int32
			if err != nil {
				st.addError("no partitions for " + topic + ": " + errText(err))
			} else if t := findTopic(md, topic); t == nil || t.Err != sarama.ErrNoError || len(t.Partitions) == 0 {
				why := "not in metadata"
				if t != nil && t.Err != sarama.ErrNoError {
					why = errText(t.Err)
				}
				st.addError("no partitions for " + topic + ": " + why)
			} else {
				for _, p := range sortedPartitions(t) {
					parts = append(parts, p.ID)
				}
			}
			if len(parts) == 0 {
				memberDied()
				return
			}
			consumer, err := sarama.NewConsumerFromClient(client)
			if err != nil {
				st.addError("member 0: " + errText(err))
				memberDied()
				return
			}
			addCloser(func() { _ = consumer.Close() })
			var pwg sync.WaitGroup
			for _, p := range parts {
				pc, err := consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
				if err != nil {
					st.addError(fmt.Sprintf("partition %d: %s", p, errText(err)))
					continue
				}
				pwg.Add(2)
				go func() {
					defer crashOnPanic()
					defer pwg.Done()
					for e := range pc.Errors() {
						st.addError(errText(e))
					}
				}()
				go func() {
					defer crashOnPanic()
					defer pwg.Done()
					for {
						select {
						case msg, ok := <-pc.Messages():
							if !ok {
								return
							}
							if !st.see(m, msg) {
								pc.AsyncClose()
							}
						case <-ctx.Done():
							pc.AsyncClose()
							for range pc.Messages() {
							}
							return
						}
					}
				}()
			}
			pwg.Wait()
		}()
	} else {
		for i := 0; i < int(members); i++ {
			idx := i
			st.byMember[strconv.Itoa(idx)] = int64(0)
			cfg := newMemberConfig(idx)
			m := &memberState{idx: idx, last: map[int32]int64{}}
			wg.Add(1)
			go func() {
				defer crashOnPanic()
				defer wg.Done()
				var cg sarama.ConsumerGroup
				var err error
				for {
					cg, err = sarama.NewConsumerGroup(brokers, group, cfg)
					if err == nil || ctx.Err() != nil {
						break
					}
					st.addError(fmt.Sprintf("member %d: %s", idx, errText(err)))
					select {
					case <-ctx.Done():
					case <-time.After(time.Second):
					}
				}
				if err != nil {
					memberDied()
					return
				}
				addCloser(func() { _ = cg.Close() })
				go func() {
					defer crashOnPanic()
					for e := range cg.Errors() {
						st.addError(fmt.Sprintf("member %d: %s", idx, errText(e)))
					}
				}()
				h := &groupHandler{st: st, m: m, commit: commit}
				for ctx.Err() == nil {
					// One session per call: it returns at a rebalance (after
					// Cleanup and the last commit of the marked offsets).
					if err := cg.Consume(ctx, []string{topic}, h); err != nil && ctx.Err() == nil {
						st.addError(fmt.Sprintf("member %d: %s", idx, errText(err)))
						select {
						case <-ctx.Done():
						case <-time.After(500 * time.Millisecond):
						}
					}
				}
			}()
		}
	}

	for time.Now().Before(deadline) {
		st.mu.Lock()
		r := st.reachedAt
		st.mu.Unlock()
		if !r.IsZero() && time.Since(r) >= time.Duration(linger*float64(time.Second)) {
			break
		}
		aliveMu.Lock()
		dead := alive <= 0
		aliveMu.Unlock()
		if dead {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	st.mu.Lock()
	st.done = true
	st.mu.Unlock()
	// Ends every session: claims stop, marked offsets are committed.
	cancel()
	if !withTimeout(30*time.Second, wg.Wait) {
		st.addError("members did not stop within 30 s")
	}

	committed := map[string]interface{}{}
	if !assign {
		// The members' last commits are done (Consume returned); they
		// leave the group on Close below.
		cfg := newConfig(a, "sarama_consume-admin")
		ok := withTimeout(20*time.Second, func() {
			admin, err := sarama.NewClusterAdmin(brokers, cfg)
			if err != nil {
				st.addError("committed: " + errText(err))
				return
			}
			defer admin.Close()
			client, err := sarama.NewClient(brokers, cfg)
			if err != nil {
				st.addError("committed: " + errText(err))
				return
			}
			defer client.Close()
			md, err := topicMetadata(client, topic)
			if err != nil {
				st.addError("committed: " + errText(err))
				return
			}
			t := findTopic(md, topic)
			if t == nil || t.Err != sarama.ErrNoError {
				return
			}
			var parts []int32
			for _, p := range sortedPartitions(t) {
				parts = append(parts, p.ID)
			}
			resp, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: parts})
			if err != nil {
				st.addError("committed: " + errText(err))
				return
			}
			if resp.Err != sarama.ErrNoError {
				st.addError("committed: " + errText(resp.Err))
			}
			for _, p := range parts {
				k := strconv.Itoa(int(p))
				b := resp.GetBlock(topic, p)
				switch {
				case b == nil:
					committed[k] = nil
				case b.Err != sarama.ErrNoError:
					st.addError("committed: " + errText(b.Err))
					committed[k] = nil
				case b.Offset < 0:
					committed[k] = nil
				default:
					committed[k] = b.Offset
				}
			}
		})
		if !ok {
			st.addError("committed: timed out")
		}
	}
	closersMu.Lock()
	for i := len(closers) - 1; i >= 0; i-- {
		f := closers[i]
		if !withTimeout(15*time.Second, f) {
			st.addError("close: timed out")
		}
	}
	closersMu.Unlock()

	st.mu.Lock()
	defer st.mu.Unlock()
	recs := make([]*record, 0, len(st.seen))
	for _, r := range st.seen {
		recs = append(recs, r)
	}
	sort.Slice(recs, func(i, j int) bool {
		if recs[i].partition != recs[j].partition {
			return recs[i].partition < recs[j].partition
		}
		return recs[i].offset < recs[j].offset
	})
	partitions := map[string]interface{}{}
	offsets := map[string]interface{}{}
	values := make([]string, 0, len(recs))
	list := make([]interface{}, 0, len(recs))
	for _, r := range recs {
		incr(partitions, r.partition)
		addOffset(offsets, r.partition, r.offset)
		if v, ok := r.value.(string); ok {
			values = append(values, v)
		}
		list = append(list, []interface{}{int64(r.partition), r.offset, r.key, r.value})
	}
	violations := st.violations
	if violations == nil {
		violations = []interface{}{}
	}
	result := map[string]interface{}{
		"records":                int64(len(st.seen)),
		"received":               st.received,
		"duplicates":             st.received - int64(len(st.seen)),
		"expect":                 expect,
		"by_member":              st.byMember,
		"partitions":             partitions,
		"offsets":                offsets,
		"per_partition_in_order": st.inOrder,
		"order_violations":       violations,
		"values_sha":             valuesSha(values),
		"committed":              committed,
		"errors":                 topErrors(st.errs),
		"elapsed_s":              elapsed(),
	}
	if a.has("--records") {
		result["records_list"] = list
	}
	ok := int64(len(st.seen)) >= expect
	msg := ""
	if !ok {
		msg = fmt.Sprintf("sarama consume: saw %d of %d records in %g s", len(st.seen), expect, timeout)
	}
	emit(result, ok, msg)
}

// --- admin -----------------------------------------------------------------------------

func admin(a *args) {
	if len(a.positional) != 1 {
		usage("admin needs one of create|describe|delete|offsets")
	}
	op := a.positional[0]
	if !contains([]string{"create", "describe", "delete", "offsets"}, op) {
		usage("unknown admin operation %s", op)
	}
	brokers := a.bootstrap()
	_, hasTopic := a.values["--topic"]
	topic := a.get("--topic", str(""))
	if op != "describe" && !hasTopic {
		usage("%s needs --topic", op)
	}
	timeout := a.secs("--timeout", 30)
	numPartitions := a.int("--partitions", i64(8))
	replicationFactor := a.int("--replication-factor", i64(1))
	configEntries := map[string]*string{}
	for _, kv := range a.repeated["--config"] {
		eq := strings.Index(kv, "=")
		if eq < 0 {
			usage("bad --config %s: expected key=value", kv)
		}
		v := kv[eq+1:]
		configEntries[kv[:eq]] = &v
	}

	cfg := newConfig(a, "sarama_admin")
	cfg.Admin.Timeout = time.Duration(timeout * float64(time.Second))
	cfg.Net.ReadTimeout = time.Duration(math.Max(timeout+5, 10) * float64(time.Second))
	if err := cfg.Validate(); err != nil {
		usage("configuration: %v", err)
	}

	r := map[string]interface{}{"op": op, "error": nil}
	if hasTopic {
		r["topic"] = topic
	} else {
		r["topic"] = nil
	}
	var errStr interface{}
	setErr := func(s string) { errStr = s }

	var adm sarama.ClusterAdmin
	var client sarama.Client
	var err error
	if !withTimeout(time.Duration((timeout+5)*float64(time.Second)), func() {
		adm, err = sarama.NewClusterAdmin(brokers, cfg)
		if err == nil {
			client, err = sarama.NewClient(brokers, cfg)
		}
	}) {
		err = fmt.Errorf("connect: timed out after %.0f s", timeout+5)
	}
	if err != nil {
		setErr(errText(err))
		switch op {
		case "describe":
			r["brokers"], r["cluster_id"], r["controller_id"], r["topics"] = []interface{}{}, nil, nil, map[string]interface{}{}
			if hasTopic {
				r["configs"], r["configs_error"] = map[string]interface{}{}, errStr
			}
		case "offsets":
			r["earliest"], r["latest"] = map[string]interface{}{}, map[string]interface{}{}
		}
	} else {
		defer adm.Close()
		defer client.Close()
		switch op {
		case "create":
			detail := &sarama.TopicDetail{NumPartitions: int32(numPartitions), ReplicationFactor: int16(replicationFactor)}
			if len(configEntries) > 0 {
				detail.ConfigEntries = configEntries
			}
			if err := adm.CreateTopic(topic, detail, false); err != nil {
				setErr(errText(err))
			}
		case "delete":
			if err := adm.DeleteTopic(topic); err != nil {
				setErr(errText(err))
			}
		case "describe":
			describe(client, topic, r, setErr)
		case "offsets":
			earliest, latest := map[string]interface{}{}, map[string]interface{}{}
			r["earliest"], r["latest"] = earliest, latest
			md, err := topicMetadata(client, topic)
			if err != nil {
				setErr(errText(err))
				break
			}
			t := findTopic(md, topic)
			if t == nil {
				setErr(kerrText(sarama.ErrUnknownTopicOrPartition, ""))
				break
			}
			if t.Err != sarama.ErrNoError {
				setErr(errText(t.Err))
				break
			}
			for _, p := range sortedPartitions(t) {
				k := strconv.Itoa(int(p.ID))
				lo, err := client.GetOffset(topic, p.ID, sarama.OffsetOldest)
				if err != nil {
					setErr(errText(err))
					break
				}
				hi, err := client.GetOffset(topic, p.ID, sarama.OffsetNewest)
				if err != nil {
					setErr(errText(err))
					break
				}
				earliest[k], latest[k] = lo, hi
			}
		}
	}

	r["error"] = errStr
	r["ok"] = errStr == nil
	ok := errStr == nil || a.has("--allow-error")
	msg := ""
	if !ok {
		msg = fmt.Sprintf("sarama admin %s: %v", op, errStr)
	}
	emit(r, ok, msg)
}

func describe(client sarama.Client, topic string, r map[string]interface{}, setErr func(string)) {
	r["brokers"], r["cluster_id"], r["controller_id"], r["topics"] = []interface{}{}, nil, nil, map[string]interface{}{}
	md, err := topicMetadata(client, topic)
	if err != nil {
		setErr(errText(err))
	} else {
		brokers := []interface{}{}
		bs := append([]*sarama.Broker(nil), md.Brokers...)
		sort.Slice(bs, func(i, j int) bool { return bs[i].ID() < bs[j].ID() })
		for _, b := range bs {
			host, portStr, _ := net.SplitHostPort(b.Addr())
			port, _ := strconv.Atoi(portStr)
			brokers = append(brokers, map[string]interface{}{"id": b.ID(), "host": host, "port": int64(port)})
		}
		r["brokers"] = brokers
		if md.Version >= 2 && md.ClusterID != nil {
			r["cluster_id"] = *md.ClusterID
		}
		if md.Version >= 1 {
			r["controller_id"] = md.ControllerID
		}
		topics := map[string]interface{}{}
		for _, t := range md.Topics {
			leaders, replicas, isrs := map[string]interface{}{}, map[string]interface{}{}, map[string]interface{}{}
			var terr interface{}
			if t.Err != sarama.ErrNoError {
				terr = errText(t.Err)
			}
			for _, p := range sortedPartitions(t) {
				k := strconv.Itoa(int(p.ID))
				leaders[k] = p.Leader
				replicas[k] = append([]int32{}, p.Replicas...)
				isrs[k] = append([]int32{}, p.Isr...)
			}
			topics[t.Name] = map[string]interface{}{
				"partitions": int64(len(t.Partitions)), "error": terr,
				"leaders": leaders, "replicas": replicas, "isrs": isrs,
			}
		}
		r["topics"] = topics
		if topic != "" {
			if t, ok := topics[topic].(map[string]interface{}); ok && t["error"] != nil {
				setErr(t["error"].(string))
			}
		}
	}
	if topic == "" {
		return
	}
	configs := map[string]interface{}{}
	r["configs"], r["configs_error"] = configs, nil
	req := &sarama.DescribeConfigsRequest{Resources: []*sarama.ConfigResource{{Type: sarama.TopicResource, Name: topic}}}
	req.Version = describeConfigsVersion(client.Config().Version)
	b, err := client.Controller()
	if err != nil {
		r["configs_error"] = errText(err)
		return
	}
	resp, err := b.DescribeConfigs(req)
	if err != nil {
		r["configs_error"] = errText(err)
		return
	}
	for _, res := range resp.Resources {
		if res.Name != topic {
			continue
		}
		if res.ErrorCode != 0 {
			r["configs_error"] = kerrText(sarama.KError(res.ErrorCode), res.ErrorMsg)
			return
		}
		for _, c := range res.Configs {
			configs[c.Name] = c.Value
		}
	}
}

// --- main ------------------------------------------------------------------------------

func version() {
	v, _ := sarama.ParseKafkaVersion(defaultKafkaVersion)
	fmt.Printf("sarama %s (%s, kafka protocol version V%s; codecs %s)\n",
		saramaVersion, runtime.Version(), strings.ReplaceAll(v.String(), ".", "_")+"_0", codecs)
	os.Exit(0)
}

func main() {
	// sarama's own goroutines report panics here (withRecover).
	sarama.PanicHandler = crash
	sarama.Logger = log.New(ioutil.Discard, "", 0)
	defer func() {
		if r := recover(); r != nil {
			if u, ok := r.(usageError); ok {
				fmt.Fprintf(os.Stderr, "sarama client: %s (--help for usage)\n", string(u))
				os.Exit(2)
			}
			crash(r)
		}
	}()
	argv := os.Args[1:]
	if len(argv) < 1 {
		usage("a command is needed: produce|consume|admin|version")
	}
	command := argv[0]
	switch command {
	case "-h", "--help":
		fmt.Printf(usageText+"\n", defaultKafkaVersion)
		os.Exit(0)
	case "version":
		version()
	}
	if _, ok := flagNames[command]; !ok {
		usage("unknown command %s", command)
	}
	a := parseArgs(command, argv[1:])
	if a.extraBool("log", os.Getenv("SARAMA_LOG") == "1") {
		sarama.Logger = log.New(os.Stderr, "[sarama] ", log.LstdFlags|log.Lmicroseconds)
	}
	switch command {
	case "produce":
		produce(a)
	case "consume":
		consume(a)
	case "admin":
		admin(a)
	}
}
