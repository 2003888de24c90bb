//! The Python tools the tests drive (localstripe, standardwebhooks,
//! honcho), installed by the harness itself: on first use, pinned, from
//! PyPI, into a project-local virtual environment (`target/pyenv`, or
//! `COBRO_TEST_PYENV`), so `cargo test` on a fresh clone runs those tests
//! instead of skipping them. `COBRO_TEST_PYTHON` names an interpreter that
//! already has them (nothing is installed then).
//!
//! A test that still cannot run says `SKIPPED` on stderr (past the
//! harness' capture) and appends a line to `target/skipped-tests.txt`;
//! `tests/zz_skipped.rs`, the last test binary `cargo test` runs, counts
//! this run's lines and names the command that lets each run. With `CI`
//! set a missing tool is a failure, never a skip.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Each module the tests import, and the pinned package that provides it.
pub const PINNED: [(&str, &str); 3] = [
    ("localstripe", "localstripe==1.15.10"),
    ("standardwebhooks", "standardwebhooks==1.1.0"),
    ("honcho", "honcho==2.0.0"),
];

/// `target/` (the tests' own `CARGO_TARGET_TMPDIR` is `target/tmp`).
fn target_dir() -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent().unwrap_or(tmp).to_path_buf()
}

/// Where the skips of every test binary are appended.
pub fn skips_file() -> PathBuf {
    target_dir().join("skipped-tests.txt")
}

/// The virtual environment's directory.
fn pyenv_dir() -> PathBuf {
    std::env::var_os("COBRO_TEST_PYENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("pyenv"))
}

/// What installs the tools by hand, for a skip's message.
fn install_hint() -> String {
    let pins: Vec<&str> = PINNED.iter().map(|(_, p)| *p).collect();
    format!(
        "python3 -m venv {dir} && {dir}/bin/pip install {} (Debian: apt-get install python3-venv first)",
        pins.join(" "),
        dir = pyenv_dir().display()
    )
}

/// The running test's path (`stripe_local::postgres::a_declined_card…`):
/// the test harness names each test's thread after it, and a
/// `#[tokio::test]` body runs on that thread (only the tasks it spawns do
/// not). So a skip names its test without the test spelling its own name.
pub fn this_test() -> String {
    std::thread::current()
        .name()
        .unwrap_or("a test on an unnamed thread")
        .to_owned()
}

/// Records that this test ([`this_test`]) ran nothing: on stderr at once,
/// and in [`skips_file`] for the run's closing count (keyed by the `cargo
/// test` process, so an earlier run's lines are not counted again).
pub fn skipped(reason: &str, command: &str) {
    let test = this_test();
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: {reason}; to run it: {command}"
    );
    let clean = |s: &str| s.replace(['\t', '\n'], " ");
    let line = format!(
        "{}\t{}\t{}\t{}\n",
        std::os::unix::process::parent_id(),
        clean(&test),
        clean(reason),
        clean(command)
    );
    let _ = std::fs::create_dir_all(target_dir());
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(skips_file())
    {
        let _ = f.write_all(line.as_bytes());
    }
}

/// The interpreter that imports `module`, installing the pinned tools into
/// the project's virtual environment on first use; `None` (the test is
/// skipped and recorded) when that cannot be done and `CI` is unset.
pub fn python_with(module: &str) -> Option<PathBuf> {
    static READY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let ready = READY.get_or_init(|| match std::env::var_os("COBRO_TEST_PYTHON") {
        Some(p) => Ok(PathBuf::from(p)),
        None => provision(&pyenv_dir()),
    });
    let why = match ready {
        Ok(python) if imports(python, module) => return Some(python.clone()),
        Ok(python) => format!("{} cannot import {module}", python.display()),
        Err(why) => why.clone(),
    };
    assert!(
        std::env::var_os("CI").is_none(),
        "CI is set and the Python tools cannot run: {why} ({})",
        install_hint()
    );
    skipped(&why, &install_hint());
    None
}

fn imports(python: &Path, module: &str) -> bool {
    Command::new(python)
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Makes `dir` a virtual environment holding [`PINNED`], once: a marker
/// file names the pins it holds, and a file lock keeps two test binaries
/// from installing at the same time.
fn provision(dir: &Path) -> Result<PathBuf, String> {
    let python = dir.join("bin").join("python");
    let pins: Vec<&str> = PINNED.iter().map(|(_, p)| *p).collect();
    let marker = dir.join("cobro-pins.txt");
    let want = pins.join("\n");
    if std::fs::read_to_string(&marker).is_ok_and(|have| have == want) && python.exists() {
        return Ok(python);
    }
    std::fs::create_dir_all(target_dir()).map_err(|e| format!("target dir: {e}"))?;
    let lock_path = dir.with_extension("lock");
    let lock =
        std::fs::File::create(&lock_path).map_err(|e| format!("{}: {e}", lock_path.display()))?;
    lock.lock()
        .map_err(|e| format!("{}: {e}", lock_path.display()))?;
    // Another binary may have finished it while this one waited.
    if std::fs::read_to_string(&marker).is_ok_and(|have| have == want) && python.exists() {
        return Ok(python);
    }
    let _ = writeln!(
        std::io::stderr(),
        "installing the tests' Python tools into {} ({})",
        dir.display(),
        pins.join(", ")
    );
    if !python.exists() {
        run(Command::new("python3").args(["-m", "venv"]).arg(dir))?;
    }
    run(Command::new(&python)
        .args(["-m", "pip", "install", "-q", "--disable-pip-version-check"])
        .args(&pins))?;
    std::fs::write(&marker, &want).map_err(|e| format!("{}: {e}", marker.display()))?;
    Ok(python)
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let what = format!("{cmd:?}");
    let out = cmd.output().map_err(|e| format!("{what}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let tail: Vec<&str> = err.lines().rev().take(3).collect();
    Err(format!(
        "{what} failed: {}",
        tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
    ))
}
