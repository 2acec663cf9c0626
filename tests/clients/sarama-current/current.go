// The part of the Sarama client that only the build against the current
// Sarama (github.com/IBM/sarama, the version in go.mod) has. It is compiled
// together with ../sarama/main.go, never alone: build.sh copies go.mod,
// go.sum, this file and main.go (its import rewritten from
// github.com/Shopify/sarama to github.com/IBM/sarama) into a build directory
// and runs go build there. init() replaces the defaults main.go has for the
// Debian 1.22.1 build (see "What differs between the two builds" there).
package main

import (
	"runtime/debug"
	"strings"
	"time"

	"github.com/IBM/sarama"
)

func init() {
	saramaVersion = "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/IBM/sarama" {
				saramaVersion = strings.TrimPrefix(d.Version, "v")
			}
		}
	}
	// Any version from 3.9.0 on makes sarama 1.61 send the same requests
	// (ApiVersions v4 from 3.9.0); 4.1.0 is the Kafka the tests compare with.
	defaultKafkaVersion = "4.1.0"
	codecs = "gzip, snappy, lz4, zstd (klauspost/compress, pure Go)"
	setCommitInterval = func(c *sarama.Config, d time.Duration) {
		c.Consumer.Offsets.AutoCommit.Enable = true
		c.Consumer.Offsets.AutoCommit.Interval = d
	}
	// Client-side errors 1.22 does not have.
	saramaErrorNames[sarama.ErrBrokerNotFound] = "SARAMA_BROKER_NOT_FOUND"
	saramaErrorNames[sarama.ErrDecompressedBatchTooLarge] = "SARAMA_DECOMPRESSED_BATCH_TOO_LARGE"
	saramaErrorNames[sarama.ErrConsumerRetriesExhausted] = "SARAMA_CONSUMER_RETRIES_EXHAUSTED"
	metadataVersion = func(v sarama.KafkaVersion) int16 {
		// sarama's own choice for the version (v11 from 2.8.0 on), the same
		// as main.go's up to 1.0.0.
		return sarama.NewMetadataRequest(v, nil).Version
	}
	describeConfigsVersion = func(v sarama.KafkaVersion) int16 {
		// The versions sarama 1.61's ClusterAdmin.DescribeConfig sends
		// (main.go sends its own request, for 1.22's sake).
		switch {
		case v.IsAtLeast(sarama.V2_8_0_0):
			return 4
		case v.IsAtLeast(sarama.V2_6_0_0):
			return 3
		case v.IsAtLeast(sarama.V2_0_0_0):
			return 2
		case v.IsAtLeast(sarama.V1_1_0_0):
			return 1
		}
		return 0
	}
}
