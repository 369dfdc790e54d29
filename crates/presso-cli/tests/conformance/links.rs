//! Link-count limits: ext4 refuses a non-directory's 65,001st link with EMLINK.

use crate::harness::{run, Rec};
use crate::modes::write_file_new;
use crate::sys::*;

/// ext4's largest link count of a non-directory.
const EXT4_LINK_MAX: u64 = 65_000;

fn link_limit(rec: &mut Rec) {
    rec.call("create f", write_file_new(&rec.p("f"), b"x"));
    let f = rec.p("f");
    let mut first_error = None;
    for i in 1..EXT4_LINK_MAX + 5 {
        if let Err(e) = link(&f, &rec.p(&format!("l{i}"))) {
            first_error = Some((i + 1, crate::harness::errno_name(e)));
            break;
        }
    }
    rec.see("first link count refused", first_error);
    rec.stat("f");
}

#[test]
fn link_count_limit_matches_ext4() {
    run("links", &[("emlink", link_limit)]);
}
