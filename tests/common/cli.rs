//! `cobro` as a shell runs it, against one database.

use std::process::{Command, Output};

/// `cobro ARGS` with `DATABASE_URL` set and warnings-only logs.
pub fn cobro_cmd(db_url: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cobro"));
    cmd.args(args)
        .env("DATABASE_URL", db_url)
        .env("RUST_LOG", "warn");
    cmd
}

/// Runs `cobro ARGS` to the end.
pub fn cobro(db_url: &str, args: &[&str]) -> Output {
    cobro_cmd(db_url, args).output().expect("run cobro")
}

/// A process's output as text (lossy).
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
