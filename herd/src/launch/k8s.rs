//! `herd launch k8s`: the Kubernetes manifests of a sharded run — the scenario as a
//! ConfigMap, an Indexed Job of N driver shards (completion index → `--shard I/N`), a
//! DaemonSet of probes (one per node, privileged, host PID and network namespaces, cgroupfs
//! and BTF mounted), the run store's URL from a Secret. herd writes them; `kubectl` applies
//! them (docs/scale-out.md). Nothing here talks to a cluster.

use std::path::Path;

use anyhow::{Context as _, Result};
use serde_json::{Value, json};

/// What the manifests describe.
#[derive(Debug, Clone)]
pub struct K8sRun {
    /// The scenario file's name and its text (the ConfigMap's one key).
    pub scenario_name: String,
    /// The scenario's text.
    pub scenario: String,
    /// The run's name: the objects' name prefix and the shards' `--run-key`.
    pub name: String,
    /// Driver shards.
    pub shards: u32,
    /// The Secret whose key `url` holds the PostgreSQL run store's URL.
    pub store_secret: String,
    /// herd's image.
    pub image: String,
    /// The namespace.
    pub namespace: String,
    /// Leave the probe DaemonSet out.
    pub no_probe: bool,
}

/// Where the shards and probes read their scenario.
const SCENARIO_DIR: &str = "/etc/herd";

impl K8sRun {
    fn env_store(&self) -> Value {
        json!({
            "name": "HERD_STORE",
            "valueFrom": {"secretKeyRef": {"name": self.store_secret, "key": "url"}}
        })
    }

    fn labels(&self, role: &str) -> Value {
        json!({"app.kubernetes.io/name": "herd", "app.kubernetes.io/instance": self.name, "herd.dev/role": role})
    }

    /// The manifests, in the order they are applied.
    pub fn manifests(&self) -> Vec<Value> {
        let meta = |suffix: &str, role: &str| {
            json!({
                "name": format!("{}{suffix}", self.name),
                "namespace": self.namespace,
                "labels": self.labels(role),
            })
        };
        let config = format!("{}-scenario", self.name);
        let scenario_path = format!("{SCENARIO_DIR}/{}", self.scenario_name);
        let scenario_volume = json!({"name": "scenario", "configMap": {"name": config}});
        let scenario_mount =
            json!({"name": "scenario", "mountPath": SCENARIO_DIR, "readOnly": true});
        let mut out = vec![
            json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": meta("-scenario", "scenario"),
                "data": {self.scenario_name.clone(): self.scenario},
            }),
            json!({
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": meta("", "driver"),
                "spec": {
                    "completionMode": "Indexed",
                    "completions": self.shards,
                    // Every shard at once: they wait for one another and start together.
                    "parallelism": self.shards,
                    // A shard started again would find its index taken (exit 2): no retries.
                    "backoffLimit": 0,
                    "template": {
                        "metadata": {"labels": self.labels("driver")},
                        "spec": {
                            "restartPolicy": "Never",
                            // One shard per node where the nodes allow.
                            "topologySpreadConstraints": [{
                                "maxSkew": 1,
                                "topologyKey": "kubernetes.io/hostname",
                                "whenUnsatisfiable": "ScheduleAnyway",
                                "labelSelector": {"matchLabels": self.labels("driver")},
                            }],
                            "containers": [{
                                "name": "herd",
                                "image": self.image,
                                "args": [
                                    "run", scenario_path,
                                    "--shard", format!("$(JOB_COMPLETION_INDEX)/{}", self.shards),
                                    "--run-key", self.name,
                                    // The DaemonSet probes each node once; a probe per shard
                                    // would count a node's containers once per shard on it.
                                    "--no-probe", "--quiet", "--out", "/tmp/herd-out",
                                ],
                                "env": [
                                    {
                                        "name": "JOB_COMPLETION_INDEX",
                                        "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}},
                                    },
                                    self.env_store(),
                                ],
                                "volumeMounts": [scenario_mount],
                            }],
                            "volumes": [scenario_volume],
                        },
                    },
                },
            }),
        ];
        if !self.no_probe {
            let host = |name: &str, path: &str| {
                (
                    json!({"name": name, "hostPath": {"path": path, "type": "Directory"}}),
                    json!({"name": name, "mountPath": path, "readOnly": true}),
                )
            };
            let (cg_vol, cg_mount) = host("cgroup", "/sys/fs/cgroup");
            let (btf_vol, btf_mount) = host("btf", "/sys/kernel/btf");
            out.push(json!({
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": meta("-probe", "probe"),
                "spec": {
                    "selector": {"matchLabels": self.labels("probe")},
                    "template": {
                        "metadata": {"labels": self.labels("probe")},
                        "spec": {
                            // The probe names containers by the host's pids and cgroups and
                            // reads socket gauges in the host's network namespaces.
                            "hostPID": true,
                            "hostNetwork": true,
                            "tolerations": [{"operator": "Exists"}],
                            "containers": [{
                                "name": "probe",
                                "image": self.image,
                                "args": [
                                    "probe",
                                    "--store", "$(HERD_STORE)",
                                    "--run-key", self.name,
                                    "--node", "$(NODE_NAME)",
                                    "--duration", "24h",
                                ],
                                "env": [
                                    {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                                    self.env_store(),
                                ],
                                // Loading eBPF programs: CAP_BPF + CAP_PERFMON at least;
                                // privileged also lets herd mount tracefs if the node has not.
                                "securityContext": {"privileged": true},
                                "volumeMounts": [cg_mount, btf_mount],
                            }],
                            "volumes": [cg_vol, btf_vol],
                        },
                    },
                },
            }));
        }
        out
    }

    /// The manifests as one multi-document YAML file.
    pub fn yaml(&self) -> Result<String> {
        let mut text = format!(
            "# Written by herd launch k8s: run {} as {} shards (docs/scale-out.md).\n",
            self.name, self.shards
        );
        for m in self.manifests() {
            text.push_str("---\n");
            text.push_str(&serde_yaml::to_string(&m).context("writing a manifest as YAML")?);
        }
        Ok(text)
    }

    /// Writes `<dir>/<name>.yaml`; returns its path.
    pub fn write(&self, dir: &Path) -> Result<std::path::PathBuf> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join(format!("{}.yaml", self.name));
        std::fs::write(&path, self.yaml()?)
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    fn run() -> K8sRun {
        K8sRun {
            scenario_name: "game.toml".into(),
            scenario: "[target]\nurl = \"http://gateway:8080\"\n".into(),
            name: "game-1".into(),
            shards: 3,
            store_secret: "herd-store".into(),
            image: "registry.example/herd:1".into(),
            namespace: "load".into(),
            no_probe: false,
        }
    }

    /// The manifests read back from their YAML, as kubectl would parse them.
    fn parsed(r: &K8sRun) -> Vec<serde_yaml::Value> {
        let text = r.yaml().unwrap();
        text.split("\n---\n")
            .skip(1)
            .map(|d| serde_yaml::from_str(d).unwrap())
            .collect()
    }

    fn strings(v: &serde_yaml::Value) -> Vec<String> {
        v.as_sequence()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_owned())
            .collect()
    }

    #[test]
    fn the_manifests_parse_and_carry_what_herd_relies_on() {
        let docs = parsed(&run());
        let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["ConfigMap", "Job", "DaemonSet"]);
        for d in &docs {
            assert_eq!(d["metadata"]["namespace"].as_str(), Some("load"));
        }
        // The scenario, byte for byte, where the shards read it.
        assert_eq!(
            docs[0]["data"]["game.toml"].as_str(),
            Some(run().scenario.as_str())
        );

        let job = &docs[1]["spec"];
        assert_eq!(job["completionMode"].as_str(), Some("Indexed"));
        assert_eq!(job["completions"].as_u64(), Some(3));
        assert_eq!(job["parallelism"].as_u64(), Some(3));
        let pod = &job["template"]["spec"];
        assert_eq!(pod["restartPolicy"].as_str(), Some("Never"));
        let c = &pod["containers"][0];
        let env = c["env"].as_sequence().unwrap();
        let index = env
            .iter()
            .find(|e| e["name"] == "JOB_COMPLETION_INDEX")
            .unwrap();
        assert_eq!(
            index["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
            Some("metadata.annotations['batch.kubernetes.io/job-completion-index']")
        );
        let store = env.iter().find(|e| e["name"] == "HERD_STORE").unwrap();
        assert_eq!(
            store["valueFrom"]["secretKeyRef"]["name"].as_str(),
            Some("herd-store")
        );
        assert_eq!(
            c["volumeMounts"][0]["mountPath"].as_str(),
            Some("/etc/herd")
        );
        assert_eq!(
            pod["volumes"][0]["configMap"]["name"].as_str(),
            Some("game-1-scenario")
        );
        // What Kubernetes hands each shard is a command line herd accepts: shard 2 of 3,
        // once $(JOB_COMPLETION_INDEX) is expanded.
        let args: Vec<String> = strings(&c["args"])
            .into_iter()
            .map(|a| a.replace("$(JOB_COMPLETION_INDEX)", "2"))
            .collect();
        let cli =
            crate::Cli::try_parse_from(std::iter::once("herd".to_owned()).chain(args)).unwrap();
        let crate::Command::Run(a) = cli.command else {
            panic!("not herd run")
        };
        assert_eq!(a.shard, Some(herd_model::Shard::new(2, 3).unwrap()));
        assert_eq!(a.run_key.as_deref(), Some("game-1"));
        assert!(a.no_probe);
        assert_eq!(a.scenario, Path::new("/etc/herd/game.toml"));

        let ds = &docs[2]["spec"]["template"]["spec"];
        assert_eq!(ds["hostPID"].as_bool(), Some(true));
        assert_eq!(ds["hostNetwork"].as_bool(), Some(true));
        let p = &ds["containers"][0];
        assert_eq!(p["securityContext"]["privileged"].as_bool(), Some(true));
        let mounts: Vec<&str> = p["volumeMounts"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|m| m["mountPath"].as_str().unwrap())
            .collect();
        assert_eq!(mounts, ["/sys/fs/cgroup", "/sys/kernel/btf"]);
        let hosts: Vec<&str> = ds["volumes"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|v| v["hostPath"]["path"].as_str().unwrap())
            .collect();
        assert_eq!(hosts, ["/sys/fs/cgroup", "/sys/kernel/btf"]);
        let args: Vec<String> = strings(&p["args"])
            .into_iter()
            .map(|a| {
                a.replace("$(HERD_STORE)", "postgres://h@db/herd")
                    .replace("$(NODE_NAME)", "node-a")
            })
            .collect();
        let cli =
            crate::Cli::try_parse_from(std::iter::once("herd".to_owned()).chain(args)).unwrap();
        let crate::Command::Probe(a) = cli.command else {
            panic!("not herd probe")
        };
        assert_eq!(
            (a.run_key.as_deref(), a.node.as_deref()),
            (Some("game-1"), Some("node-a"))
        );

        let no_probe = K8sRun {
            no_probe: true,
            ..run()
        };
        assert_eq!(parsed(&no_probe).len(), 2);
    }
}
