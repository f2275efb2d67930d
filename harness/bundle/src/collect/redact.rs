//! Credential redaction: the collector copies job graphs and operator specs
//! into bundles, and a bundle travels; no value whose key suggests a secret
//! goes with it.

use serde_json::Value as Json;

/// Parameter names that suggest a credential; their values are redacted.
const CREDENTIAL_WORDS: [&str; 8] =
    ["password", "passwd", "secret", "token", "credential", "apikey", "api_key", "private_key"];

pub const REDACTED: &str = "<redacted>";

/// Replaces every value whose key suggests a credential, at any depth.
pub fn redact(value: &mut Json) {
    match value {
        Json::Object(map) => {
            for (k, v) in map.iter_mut() {
                let lower = k.to_ascii_lowercase();
                if CREDENTIAL_WORDS.iter().any(|w| lower.contains(w)) || lower == "access_key" {
                    *v = Json::String(REDACTED.into());
                } else {
                    redact(v);
                }
            }
        }
        Json::Array(items) => items.iter_mut().for_each(redact),
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
        assert_eq!(params["nested"]["token_ttl"], REDACTED);
    }
}
