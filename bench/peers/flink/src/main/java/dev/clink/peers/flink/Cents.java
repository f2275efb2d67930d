package dev.clink.peers.flink;

/** Amounts as whole cents, read and written as our jobs do (at most two fraction digits; -0.07, 12, 12.5). */
final class Cents {
    private Cents() {}

    static long parse(String text) {
        boolean negative = text.startsWith("-");
        String digits = negative ? text.substring(1) : text;
        int dot = digits.indexOf('.');
        long whole = Long.parseLong(dot < 0 ? digits : digits.substring(0, dot));
        long frac = 0;
        if (dot >= 0) {
            String f = digits.substring(dot + 1);
            if (f.isEmpty() || f.length() > 2) {
                throw new IllegalArgumentException("an amount of more than two fraction digits: " + text);
            }
            frac = Long.parseLong(f.length() == 1 ? f + "0" : f);
        }
        long cents = whole * 100 + frac;
        return negative ? -cents : cents;
    }

    static String render(long cents) {
        long abs = Math.abs(cents);
        String frac = Long.toString(abs % 100);
        return (cents < 0 ? "-" : "") + (abs / 100) + "." + (frac.length() == 1 ? "0" + frac : frac);
    }
}
