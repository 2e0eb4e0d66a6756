//! `wisckey-raft-rocks serve`: the replicated server on the RocksDB store (placeholder until
//! the server module lands).
fn main() {
    eprintln!("wisckey-raft-rocks: the server is not built yet");
    std::process::exit(2);
}
