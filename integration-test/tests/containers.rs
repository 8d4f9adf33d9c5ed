//! Containers that appear during a run are discovered and counted; containers that vanish are
//! marked ended while the others continue.

use herd_probe::{
    cgroup::CgroupLayout, containers::ContainerSet, discover::Kind, sampler::Sampler,
};
use integration_test::{Pair, load_probe, privileged};
use probe_common::Counter;

#[test]
fn containers_are_discovered_mid_run_and_marked_ended_when_removed() {
    if !privileged("containers_are_discovered_mid_run") {
        return;
    }
    let layout = CgroupLayout::detect().unwrap();
    let probe = load_probe();
    let mut sampler =
        Sampler::new(probe, ContainerSet::default().with_discovery(), layout).unwrap();
    let first = sampler.sample().unwrap();

    // Created after the sampler started.
    let mut pair = Pair::new("test").unwrap();
    // The server outlives the client, as services do.
    pair.start_server(9100, &["--max-conns", "1000"]).unwrap();
    assert_eq!(
        pair.run_client(9100, 40, &[]).unwrap(),
        "connected 40 failed 0"
    );
    std::thread::sleep(std::time::Duration::from_millis(200));
    let (cli_id, srv_id) = (pair.client.cgroup_id, pair.server.cgroup_id);
    let during = sampler.sample().unwrap();
    let find = |sampler: &Sampler, id: u64| {
        sampler
            .containers()
            .containers()
            .iter()
            .find(|c| c.cgroup_id == id)
            .cloned()
            .expect("discovered")
    };
    let (cli, srv) = (find(&sampler, cli_id), find(&sampler, srv_id));
    assert_eq!(cli.kind, Kind::Herd);
    assert!(cli.name.starts_with("client"), "{}", cli.name);
    let row = |iv: &herd_model::ProbeInterval, name: &str| {
        iv.containers
            .iter()
            .find(|c| c.container == name)
            .map(|c| c.counts.clone())
            .unwrap_or_else(|| panic!("{name} missing from {:?}", iv.containers))
    };
    assert_eq!(row(&during, &cli.name).get(Counter::Connects), 40);
    assert_eq!(row(&during, &srv.name).get(Counter::Accepts), 40);
    assert!(first.containers.iter().all(|c| c.container != cli.name));
    // The pair's destination is labelled with the server container (its own netns).
    let p = during
        .pairs
        .iter()
        .find(|p| p.container == cli.name && p.remote.port() == 9100)
        .expect("pair");
    assert_eq!(p.remote_container.as_deref(), Some(srv.name.as_str()));

    drop(pair);
    let after = sampler.sample().unwrap();
    let ended = find(&sampler, cli_id);
    assert!(
        ended.ended_ns.is_some(),
        "client container not marked ended"
    );
    // Its row stays in the report, with nothing new.
    assert_eq!(row(&after, &cli.name).get(Counter::Connects), 0);
}
