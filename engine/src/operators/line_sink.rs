//! `line_file_sink`: the at-least-once sink. It appends each row as a line to
//! `<output>/<uid>/part-<subtask>.txt` and makes the file durable at every
//! barrier. It keeps no state, so a restore replays rows it may already have
//! written: its output holds every row at least once.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;


use crate::checkpoint::durable::create_dir_durably;
use crate::checkpoint::StateSlots;
use crate::value::{render_line_into, Row};

use super::{Descriptor, OperatorError, Prepared, Setup, Sink, SinkFamily, StateDecoding};

pub const TYPE: &str = "line_file_sink";

pub struct LineFileSink {
    dir: PathBuf,
    subtask: u32,
    file: Option<File>,
    pending: Vec<u8>,
}

impl LineFileSink {
    pub fn new(dir: PathBuf, subtask: u32) -> Self {
        Self { dir, subtask, file: None, pending: Vec::new() }
    }

    fn path(&self) -> PathBuf {
        self.dir.join(format!("part-{}.txt", self.subtask))
    }
}

impl Sink for LineFileSink {
    fn family(&self) -> SinkFamily {
        FAMILY
    }

    fn open(&mut self, _restored: Option<&StateSlots>) -> Result<u64, OperatorError> {
        create_dir_durably(&self.dir).map_err(OperatorError::io(&self.dir))?;
        let path = self.path();
        let file = OpenOptions::new().create(true).append(true).open(&path).map_err(OperatorError::io(&path))?;
        self.file = Some(file);
        Ok(0)
    }

    fn write(&mut self, row: &Row) -> Result<(), OperatorError> {
        render_line_into(&mut self.pending, row);
        self.pending.push(b'\n');
        if self.pending.len() >= 64 * 1024 {
            self.flush()?;
        }
        Ok(())
    }

    fn prepare(&mut self, _checkpoint: u64) -> Result<Prepared, OperatorError> {
        let staged = !self.pending.is_empty();
        self.flush()?;
        let path = self.path();
        if let Some(file) = &self.file {
            file.sync_data().map_err(OperatorError::io(&path))?;
        }
        Ok(Prepared { staged, ..Prepared::SEALED })
    }

    fn snapshot(&self) -> Result<StateSlots, OperatorError> {
        Ok(StateSlots::new())
    }

    fn abort(&mut self, _checkpoint: u64) -> Result<(), OperatorError> {
        Ok(())
    }

    fn commit(&mut self, _checkpoint: u64) -> Result<Vec<u64>, OperatorError> {
        Ok(Vec::new())
    }
}

impl LineFileSink {
    fn flush(&mut self) -> Result<(), OperatorError> {
        let path = self.path();
        let file = self.file.as_mut().ok_or_else(|| OperatorError::Protocol("the sink is not open".into()))?;
        file.write_all(&self.pending).map_err(OperatorError::io(&path))?;
        self.pending.clear();
        Ok(())
    }
}

pub const DESCRIPTOR: Descriptor = Descriptor::sink(TYPE, FAMILY, build, StateDecoding::Stateless);

/// Writes as rows arrive: a replay after a restore may write them again.
const FAMILY: SinkFamily = SinkFamily::AtLeastOnce;

fn build(setup: &Setup<'_>) -> Result<Box<dyn Sink>, OperatorError> {
    Ok(Box::new(LineFileSink::new(setup.env.output_dir.join(setup.uid), setup.subtask)))
}
