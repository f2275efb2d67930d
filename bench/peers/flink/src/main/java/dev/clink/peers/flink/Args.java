package dev.clink.peers.flink;

import java.util.HashMap;
import java.util.Map;

/** --name value pairs. */
final class Args {
    private Args() {}

    static Map<String, String> parse(String[] argv) {
        Map<String, String> out = new HashMap<>();
        for (int i = 0; i < argv.length; i += 2) {
            if (!argv[i].startsWith("--") || i + 1 >= argv.length) {
                throw new IllegalArgumentException("arguments are --name value pairs: " + String.join(" ", argv));
            }
            out.put(argv[i].substring(2), argv[i + 1]);
        }
        return out;
    }

    static String required(Map<String, String> args, String name) {
        String v = args.get(name);
        if (v == null) {
            throw new IllegalArgumentException("--" + name + " is required");
        }
        return v;
    }
}
