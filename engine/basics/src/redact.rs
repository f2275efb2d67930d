//! Credential redaction: job graphs and operator specs travel (into the
//! checkpoint directory beside the markers, into incident bundles), and no
//! value whose key suggests a secret goes with them. One rule, used by the
//! engine when it records its graph and by the collector.

use serde_json::Value as Json;

/// Parameter names that suggest a credential; their values are redacted.
const CREDENTIAL_WORDS: [&str; 8] =
    ["password", "passwd", "secret", "token", "credential", "apikey", "api_key", "private_key"];

pub const REDACTED: &str = "<redacted>";

/// Replaces every string whose key suggests a credential, at any depth.
/// Numbers and booleans are kept: they are settings (a token's lifetime), and
/// a graph redacted this way still plans.
pub fn redact(value: &mut Json) {
    match value {
        Json::Object(map) => {
            for (k, v) in map.iter_mut() {
                let lower = k.to_ascii_lowercase();
                let suggests = CREDENTIAL_WORDS.iter().any(|w| lower.contains(w)) || lower == "access_key";
                if suggests {
                    scrub(v);
                } else {
                    redact(v);
                }
            }
        }
        Json::Array(items) => items.iter_mut().for_each(redact),
        _ => {}
    }
}

/// Replaces every string under a credential's key, at any depth.
fn scrub(value: &mut Json) {
    match value {
        Json::String(_) => *value = Json::String(REDACTED.into()),
        Json::Object(map) => map.values_mut().for_each(scrub),
        Json::Array(items) => items.iter_mut().for_each(scrub),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_like_parameters_are_redacted_at_any_depth() {
        let mut v = serde_json::json!({
            "operators": [{"params": {"key": ["account"], "password": "hunter2", "nested": {"API_KEY": "k", "token_ttl": 3}}}]
        });
        redact(&mut v);
        let params = &v["operators"][0]["params"];
        assert_eq!(params["key"], serde_json::json!(["account"]));
        assert_eq!(params["password"], REDACTED);
        assert_eq!(params["nested"]["API_KEY"], REDACTED);
        assert_eq!(params["nested"]["token_ttl"], 3, "a number is a setting, not a secret");
        let mut nested = serde_json::json!({"secret": {"value": "s", "rotate_days": 7}});
        redact(&mut nested);
        assert_eq!(nested, serde_json::json!({"secret": {"value": REDACTED, "rotate_days": 7}}));
    }
}
