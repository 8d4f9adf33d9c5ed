//! `herd launch swarm` on a real swarm of two Docker engines on this host
//! (`integration_test::nodes`: each engine in network, UTS and mount namespaces of its own,
//! joined over a bridge in 198.18.64.0/20). One cluster serves every test here; it is made by
//! the first test that needs it and removed when the test process exits (and swept by the
//! next run if it was killed). Every test is named `docker_…`: xtask counts them with the
//! other Docker tests.

use std::{
    path::Path,
    sync::{Mutex, MutexGuard},
    time::Instant,
};

use integration_test::{nodes::Cluster, privileged};

/// The cluster every test here shares; `None` until the first one makes it.
static CLUSTER: Mutex<Option<Cluster>> = Mutex::new(None);

extern "C" fn remove_cluster() {
    let mut g = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    drop(g.take());
}

/// The shared cluster (made now if it is not yet), every node up; one test at a time.
fn cluster() -> MutexGuard<'static, Option<Cluster>> {
    let mut g = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    if g.is_none() {
        let t = Instant::now();
        let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target");
        // SAFETY: registers a plain function; it runs once, at exit, after the tests.
        unsafe { libc::atexit(remove_cluster) };
        *g = Some(
            Cluster::start(&target, 2, Path::new(env!("CARGO_BIN_EXE_herd")))
                .unwrap_or_else(|e| panic!("making the two-node swarm: {e:#}")),
        );
        eprintln!(
            "nodes: two-node swarm ready in {:.1} s",
            t.elapsed().as_secs_f64()
        );
    }
    let c = g.as_mut().expect("made above");
    for i in 0..c.nodes.len() {
        if !c.nodes[i].is_up() {
            c.revive(i)
                .unwrap_or_else(|e| panic!("reviving node {}: {e:#}", i + 1));
        }
    }
    g
}

#[test]
fn docker_nodes_smoke() {
    if !privileged("docker_nodes_smoke") {
        return;
    }
    let g = cluster();
    let c = g.as_ref().unwrap();
    eprintln!("{:?}", c.node_states());
}
