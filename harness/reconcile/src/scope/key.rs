//! The audit's key: the columns that identify one row the job writes (a
//! windowed job's is its windows' identity, which the job graph names).

use thiserror::Error;

use super::Scope;

/// Why `--key` does not name the audit's key.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum KeyError {
    /// A windowed job's key is its windows' identity, nothing else.
    #[error(
        "--key {} is not the windows' identity {}, which the job's window names",
        .given.join(","),
        .identity.join(",")
    )]
    NotTheWindowIdentity { given: Vec<String>, identity: Vec<String> },
    /// A record-wise job's key must be named.
    #[error("name the key with --key: the columns that identify one row the job writes")]
    Missing,
    /// `written` lists the columns the sink writes.
    #[error("--key {name:?} is not a column the sink writes (it writes {})", .written.join(", "))]
    NotAColumn { name: String, written: Vec<String> },
    #[error("--key names {name:?} twice")]
    Twice { name: String },
}

impl Scope {
    /// The audit's key: the window identity for a windowed job, else `key`.
    pub fn key_columns(&self, key: Option<&[String]>) -> Result<Vec<usize>, KeyError> {
        let names: Vec<String> = match (self.shape.window_identity(), key) {
            (Some(identity), None) => identity,
            (Some(identity), Some(given)) if given == identity.as_slice() => identity,
            (Some(identity), Some(given)) => {
                return Err(KeyError::NotTheWindowIdentity { given: given.to_vec(), identity })
            }
            (None, Some(given)) => given.to_vec(),
            (None, None) => return Err(KeyError::Missing),
        };
        let mut indices = Vec::new();
        for name in &names {
            let Some(i) = self.shape.columns.iter().position(|c| &c.name == name) else {
                return Err(KeyError::NotAColumn {
                    name: name.clone(),
                    written: self.shape.columns.iter().map(|c| c.name.clone()).collect(),
                });
            };
            if indices.contains(&i) {
                return Err(KeyError::Twice { name: name.clone() });
            }
            indices.push(i);
        }
        Ok(indices)
    }
}
