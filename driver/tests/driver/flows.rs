//! `then` chains and `for_each` against a loopback server: every item runs its op once, a
//! list longer than `max_items` is cut and counted as `truncated`, a pointer that selects
//! nothing makes the listing op `capture_missing` (and runs nothing after it), `sample`
//! draws that many items, and a failed check is reported with its resource.

use herd_driver::outcome::sha256_hex;
use herd_testkit::{Proto, Reply, Server};
use serde_json::json;

use crate::support::{run, scenario};

const SRC: &str = r#"
[target]
url = "{url}"
[player]
max_ops = MAX_OPS
[[op]]
name = "list"
path = "/list/LIST"
then = ["item"]
[[op]]
name = "item"
path = "/item/{item}"
for_each = "/items/*/id"
max_items = 4
SAMPLE
check = { sha256 = "{item}" }
[[step]]
players = 1
duration = "2s"
"#;

async fn server() -> Server {
    Server::http(Proto::H1)
        .route("/list/none", Reply::ok().json(json!({ "other": [] })))
        .route_fn("/list/{n}", |r| {
            let n = r.num("n");
            // Each item's id is the sha256 of its body, so the check holds, except for `bad`.
            let items: Vec<_> = (0..n)
                .map(|i| json!({ "id": sha256_hex(format!("body-{i}").as_bytes()) }))
                .collect();
            async move { Reply::ok().json(json!({ "items": items })) }
        })
        .route_fn("/item/{id}", |r| {
            // The body whose sha256 the id is, found by trying the small range the list uses.
            let id = r.param("id").to_owned();
            let body = (0..16)
                .map(|i| format!("body-{i}"))
                .find(|b| sha256_hex(b.as_bytes()) == id)
                .unwrap_or_else(|| "corrupted".into());
            // Item 2's data is damaged, as a corrupted layer on a registry's disk.
            let body = if body == "body-2" {
                "body-2!".into()
            } else {
                body
            };
            async move { Reply::ok().body(body) }
        })
        .start()
        .await
}

fn src(list: &str, max_ops: u64, sample: &str) -> String {
    SRC.replace("LIST", list)
        .replace("MAX_OPS", &max_ops.to_string())
        .replace("SAMPLE", sample)
}

#[tokio::test]
async fn for_each_runs_once_per_item_and_cuts_and_counts_a_long_list() {
    let _quiet = crate::support::QUIET.read().await;
    let server = server().await;
    // Three lists of 3: 3 + 9 ops (max_ops counts every op the player sends).
    let r = run(scenario(&src("3", 12, ""), &server)).await;
    assert_eq!(r.outcome_count("list", "ok"), 3);
    assert_eq!(
        r.outcome_count("item", "ok"),
        6,
        "items 0 and 1 of each list"
    );
    assert_eq!(
        r.outcome_count("item", "check_failed"),
        3,
        "item 2 of each list"
    );
    assert_eq!(server.route_count("/item/{id}"), 9);
    assert_eq!(r.requests, 12);
    let failures = &r.play.check_failures;
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0].op, "item");
    assert_eq!(
        failures[0].resource,
        format!("/item/{}", sha256_hex(b"body-2"))
    );
    assert_eq!(failures[0].count, 3);

    // Lists of 10 with max_items = 4: each list runs 4 items and counts one `truncated`,
    // which sent nothing.
    let server = self::server().await;
    let r = run(scenario(&src("10", 10, ""), &server)).await;
    assert_eq!(r.outcome_count("list", "ok"), 2);
    assert_eq!(r.outcome_count("item", "truncated"), 2);
    assert_eq!(
        r.outcome_count("item", "ok") + r.outcome_count("item", "check_failed"),
        8
    );
    assert_eq!(server.route_count("/item/{id}"), 8);
    assert_eq!(r.requests, 10, "a truncation is not a request");

    // sample = 2 draws two of the ten, no truncation.
    let server = self::server().await;
    let r = run(scenario(&src("10", 6, "sample = 2"), &server)).await;
    assert_eq!(r.outcome_count("list", "ok"), 2);
    assert_eq!(r.outcome_count("item", "truncated"), 0);
    assert_eq!(server.route_count("/item/{id}"), 4);
}

#[tokio::test]
async fn a_for_each_that_selects_nothing_is_capture_missing_and_runs_nothing() {
    let _quiet = crate::support::QUIET.read().await;
    let server = server().await;
    for list in ["none", "0"] {
        let r = run(scenario(&src(list, 3, ""), &server)).await;
        assert_eq!(r.outcome_count("list", "capture_missing"), 3, "{list}");
        assert_eq!(r.outcome_count("item", "ok"), 0, "{list}");
    }
    assert_eq!(server.route_count("/item/{id}"), 0);
}
