//! The probe's error type: each variant says what herd was doing and what to do about it.

use aya::{EbpfError, maps::MapError, programs::ProgramError};

use crate::{btf::BtfError, cgroup::CgroupError};

/// Why the probe could not start or read its maps.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The process lacks a capability needed to load BPF programs.
    #[error(
        "herd's kernel probe needs {} (missing: {}); run it as root, e.g. `sudo herd probe`, or grant the capabilities",
        "CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN",
        .0.join(", ")
    )]
    MissingCapability(Vec<&'static str>),
    /// The kernel's BTF could not be read or lacks something the probe needs.
    #[error("resolving kernel struct offsets: {0}")]
    Btf(#[from] BtfError),
    /// The cgroup layout is unusable.
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    /// The embedded eBPF object could not be parsed or its maps created.
    #[error("loading herd's eBPF object: {0}")]
    Object(#[source] EbpfError),
    /// The number of possible CPUs (what the per-CPU run-queue slots are sized by) could not
    /// be read.
    #[error("herd's kernel probe could not count this machine's CPUs ({0}); is /sys mounted?")]
    Cpus(#[source] std::io::Error),
    /// The object lacks a program the loader expects (a build mismatch).
    #[error("the embedded eBPF object has no program `{0}`; rebuild herd")]
    MissingProgram(&'static str),
    /// Reading the task iterator (the run-queue walk) failed.
    #[error("reading the run-queue task walk (the runq_tasks iterator): {0}")]
    TaskWalk(#[source] std::io::Error),
    /// The object lacks a map the loader expects (a build mismatch).
    #[error("the embedded eBPF object has no map `{0}`; rebuild herd")]
    MissingMap(&'static str),
    /// The kernel refused a program.
    #[error("the kernel refused program `{program}` ({reason}); it needs {needs}{hint}")]
    Load {
        /// Program name.
        program: &'static str,
        /// Kernel requirements.
        needs: &'static str,
        /// Short reason (the syscall error).
        reason: String,
        /// The verifier log, when the kernel produced one.
        verifier_log: Option<String>,
        /// Tells the user how to see the log.
        hint: &'static str,
    },
    /// tracefs was not mounted and could not be mounted for attaching a tracepoint.
    #[error("{0}")]
    Tracefs(String),
    /// A program loaded but could not be attached.
    #[error("attaching program `{program}` to {hook}: {source}")]
    Attach {
        /// Program name.
        program: &'static str,
        /// Where it was being attached.
        hook: String,
        /// The error.
        #[source]
        source: ProgramError,
    },
    /// Reading a map failed.
    #[error("reading BPF map {0}: {1}")]
    Map(&'static str, #[source] MapError),
}

impl ProbeError {
    pub(crate) fn load(program: &'static str, needs: &'static str, e: ProgramError) -> Self {
        let (reason, verifier_log) = match e {
            ProgramError::LoadError {
                io_error,
                verifier_log,
            } => {
                let log = verifier_log.to_string();
                (
                    io_error.to_string(),
                    (!log.trim().is_empty()).then_some(log),
                )
            }
            other => (other.to_string(), None),
        };
        let hint = if verifier_log.is_some() {
            "; rerun with --verbose for the verifier log"
        } else {
            ""
        };
        ProbeError::Load {
            program,
            needs,
            reason,
            verifier_log,
            hint,
        }
    }

    /// The verifier's log when a program was rejected, for `--verbose`.
    pub fn verifier_log(&self) -> Option<&str> {
        match self {
            ProbeError::Load { verifier_log, .. } => verifier_log.as_deref(),
            _ => None,
        }
    }

    /// True when the error is about privileges or kernel support, not a bug: the CLI exits 2.
    pub fn is_environment(&self) -> bool {
        matches!(
            self,
            ProbeError::MissingCapability(_)
                | ProbeError::Btf(_)
                | ProbeError::Cgroup(_)
                | ProbeError::Tracefs(_)
        )
    }
}
