// `sqlx::migrate!` embeds the files under migrations/ at compile time, but on
// stable Rust cargo does not know they are inputs: a new migration would not
// rebuild the binaries that carry them. This tells it.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
