//! The etcd-operator binary: `run` the operator (default) or print the `crd`.

fn main() -> std::process::ExitCode {
    etcd_operator::cli::main()
}
