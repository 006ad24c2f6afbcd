//! The `binky` binary: the CLI, or the daemon with `binky daemon run`.

fn main() -> std::process::ExitCode {
    binky::main()
}
