// The launcher of Kroxylicious for the router benchmark: what
// io.kroxylicious.app.Kroxylicious (kroxylicious-app, not served by the Maven
// Central this machine reaches) does, without picocli. Compiled by
// scripts/peers.d/kroxylicious into .peers/kroxylicious/classes.
//
//   java -cp '.peers/kroxylicious/classes:.peers/kroxylicious/libs/*' \
//       KroxyliciousMain --config proxy.yaml
//
// Parses the configuration with Kroxylicious's own ConfigParser, starts a
// KafkaProxy with the default features (none unlocked), closes it on
// SIGTERM and blocks until then. No filters unless the configuration names
// some.

import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;

import io.kroxylicious.proxy.KafkaProxy;
import io.kroxylicious.proxy.config.ConfigParser;
import io.kroxylicious.proxy.config.Configuration;
import io.kroxylicious.proxy.internal.config.Features;

final class KroxyliciousMain {
    public static void main(String[] args) throws Exception {
        if (args.length != 2 || !(args[0].equals("--config") || args[0].equals("-c"))) {
            System.err.println("usage: KroxyliciousMain --config FILE");
            System.exit(2);
        }
        ConfigParser parser = new ConfigParser();
        Configuration config;
        try (InputStream in = Files.newInputStream(Path.of(args[1]))) {
            config = parser.parseConfiguration(in);
        }
        KafkaProxy proxy = new KafkaProxy(parser, config, Features.defaultFeatures());
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                proxy.close();
            } catch (Exception e) {
                System.err.println("closing the proxy: " + e);
            }
        }, "proxy-shutdown-hook"));
        proxy.startup();
        proxy.block();
    }
}
