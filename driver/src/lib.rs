//! herd load driver.
