//! Roll-ups on a real PostgreSQL (started and removed by the test): the run of
//! store/tests/rollup_run/mod.rs recorded there rolls up in the same transactions and reads
//! back with the same numbers as unrolled.

#[path = "../../store/tests/rollup_run/mod.rs"]
mod rollup_run;

use integration_test::{Postgres, privileged};

#[test]
fn a_run_rolls_up_in_postgresql_with_the_same_numbers() {
    if !privileged("a_run_rolls_up_in_postgresql_with_the_same_numbers") {
        return;
    }
    let pg = Postgres::start().unwrap();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(rollup_run::recorded_and_checked(&pg.url));
}
