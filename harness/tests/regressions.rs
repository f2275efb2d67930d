//! One test per regression bundle under `fixtures/regressions/`: dropping a
//! bundle there adds a test. Each replays its frozen epoch and compares with
//! the golden emissions. Finding no bundle at all is a failure, not a pass.

use std::path::PathBuf;

use clink_replay::regression::{find_bundles, run_bundle};
use libtest_mimic::{Arguments, Failed, Trial};

fn main() {
    let args = Arguments::from_args();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/regressions");
    let bundles = match find_bundles(&root) {
        Ok(found) => found,
        Err(e) => {
            let why = format!("{}: {e}", root.display());
            let trial = Trial::test("regression::unreadable", move || Err(why.into()));
            libtest_mimic::run(&args, vec![trial]).exit();
        }
    };
    let mut trials: Vec<Trial> = bundles
        .into_iter()
        .map(|dir| {
            let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            Trial::test(format!("regression::{name}"), move || {
                run_bundle(&dir).map(|_| ()).map_err(|e| Failed::from(format!("{}: {e}", dir.display())))
            })
        })
        .collect();
    if trials.is_empty() {
        let shown = root.display().to_string();
        trials.push(Trial::test("regression::none_found", move || {
            Err(format!("no regression bundle under {shown}: an empty suite proves nothing").into())
        }));
    }
    libtest_mimic::run(&args, trials).exit();
}
