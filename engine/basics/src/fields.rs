//! Typed access to the fields of a JSON document, every error naming the path
//! of the field at fault (`operators[2].id`) and what was expected.
//!
//! Every reader of a document of ours (jobs, manifests, markers, specs)
//! takes its fields through [`Fields`], so a refusal always says where.

use serde_json::Value as Json;
use thiserror::Error;

use crate::ids::parse_decimal_u64;

/// A refusal of a document: where in it, and why.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("{path}: {message}")]
pub struct FieldError {
    pub path: String,
    pub message: String,
}

impl FieldError {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self { path: path.into(), message: message.into() }
    }
}

/// One JSON object and the path it sits at.
pub struct Fields<'a> {
    map: &'a serde_json::Map<String, Json>,
    path: String,
}

impl<'a> Fields<'a> {
    pub fn object(value: &'a Json, path: &str) -> Result<Self, FieldError> {
        match value {
            Json::Object(map) => Ok(Self { map, path: path.to_string() }),
            other => Err(FieldError::new(path, format!("expected an object, found {}", kind_name(other)))),
        }
    }

    /// The object a field holds.
    pub fn child(&self, field: &str) -> Result<Fields<'a>, FieldError> {
        Fields::object(self.value(field)?, &self.field_path(field))
    }

    pub fn field_path(&self, field: &str) -> String {
        if self.path == "$" {
            field.to_string()
        } else {
            format!("{}.{field}", self.path)
        }
    }

    pub fn error(&self, field: &str, message: impl Into<String>) -> FieldError {
        FieldError::new(self.field_path(field), message)
    }

    /// Refuses any field not in `allowed`, so a misspelt field is not ignored.
    pub fn only(&self, allowed: &[&str]) -> Result<(), FieldError> {
        match self.map.keys().find(|k| !allowed.contains(&k.as_str())) {
            None => Ok(()),
            Some(k) if allowed.is_empty() => Err(self.error(k, "unknown field; this takes no fields")),
            Some(k) => Err(self.error(k, format!("unknown field; expected one of {}", allowed.join(", ")))),
        }
    }

    pub fn get(&self, field: &str) -> Option<&'a Json> {
        self.map.get(field)
    }

    pub fn value(&self, field: &str) -> Result<&'a Json, FieldError> {
        self.get(field).ok_or_else(|| self.error(field, "missing"))
    }

    pub fn str(&self, field: &str) -> Result<&'a str, FieldError> {
        match self.value(field)? {
            Json::String(s) => Ok(s),
            other => Err(self.error(field, format!("expected a string, found {}", kind_name(other)))),
        }
    }

    pub fn boolean(&self, field: &str) -> Result<bool, FieldError> {
        match self.value(field)? {
            Json::Bool(b) => Ok(*b),
            other => Err(self.error(field, format!("expected a boolean, found {}", kind_name(other)))),
        }
    }

    pub fn u64(&self, field: &str) -> Result<u64, FieldError> {
        match self.value(field)?.as_u64() {
            Some(n) => Ok(n),
            None => {
                Err(self
                    .error(field, format!("expected a non-negative integer, found {}", kind_name(self.value(field)?))))
            }
        }
    }

    pub fn u32(&self, field: &str) -> Result<u32, FieldError> {
        let v = self.u64(field)?;
        u32::try_from(v).map_err(|_| self.error(field, format!("{v} does not fit 32 bits")))
    }

    /// A 64-bit id written as decimal text (JSON numbers stop at 2^53 in many readers).
    pub fn decimal_id(&self, field: &str) -> Result<u64, FieldError> {
        match self.value(field)? {
            Json::String(s) => parse_decimal_u64(s)
                .ok_or_else(|| self.error(field, format!("expected a 64-bit id as decimal text, found {s:?}"))),
            other => Err(self.error(
                field,
                format!("expected a 64-bit id as decimal text (a JSON string), found {}", kind_name(other)),
            )),
        }
    }

    pub fn array(&self, field: &str) -> Result<&'a Vec<Json>, FieldError> {
        match self.value(field)? {
            Json::Array(items) => Ok(items),
            other => Err(self.error(field, format!("expected an array, found {}", kind_name(other)))),
        }
    }

    pub fn str_list(&self, field: &str) -> Result<Vec<String>, FieldError> {
        let items = self.array(field)?;
        items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Json::String(s) => Ok(s.clone()),
                other => Err(FieldError::new(
                    format!("{}[{i}]", self.field_path(field)),
                    format!("expected a string, found {}", kind_name(other)),
                )),
            })
            .collect()
    }

    /// Each object of an array field, read by `parse` with its own path.
    pub fn objects<T>(
        &self,
        field: &str,
        parse: impl Fn(&Fields<'a>) -> Result<T, FieldError>,
    ) -> Result<Vec<T>, FieldError> {
        let path = self.field_path(field);
        self.array(field)?
            .iter()
            .enumerate()
            .map(|(i, item)| parse(&Fields::object(item, &format!("{path}[{i}]"))?))
            .collect()
    }

    /// A field that may be absent or null.
    pub fn optional<T>(
        &self,
        field: &str,
        read: impl Fn(&Fields<'a>, &str) -> Result<T, FieldError>,
    ) -> Result<Option<T>, FieldError> {
        match self.get(field) {
            None | Some(Json::Null) => Ok(None),
            Some(_) => read(self, field).map(Some),
        }
    }
}

/// How a JSON value is named in an error.
pub fn kind_name(value: &Json) -> &'static str {
    match value {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}

/// How deeply a JSON value nests (a scalar is 0).
pub fn depth(value: &Json) -> usize {
    match value {
        Json::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Json::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn errors_name_the_path_and_what_was_expected() {
        let doc = json!({"a": {"b": [{"id": 7}], "n": -1}, "s": "x"});
        let root = Fields::object(&doc, "$").unwrap();
        let a = root.child("a").unwrap();
        let err = a.objects("b", |f| f.decimal_id("id")).unwrap_err();
        assert_eq!(err.path, "a.b[0].id");
        assert!(err.message.contains("decimal text"), "{err}");
        assert_eq!(a.u64("n").unwrap_err().path, "a.n");
        assert_eq!(root.only(&["a"]).unwrap_err().path, "s");
        assert_eq!(root.optional("missing", |f, k| f.str(k)).unwrap(), None);
        assert_eq!(depth(&doc), 4);
    }
}
