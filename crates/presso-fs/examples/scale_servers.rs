//! Throwaway servers for `bench/scale-out.sh`: starts a PostgreSQL server and a SeaweedFS S3
//! server on this machine (the tests' own, see `presso_meta::postgres::test_server` and
//! `presso_objects::test_server`), prints how to reach them, then answers requests on standard
//! input until it closes, when both servers stop and their directories go.
//!
//! Printed first, one per line: `META=URL-OF-A-FRESH-SCHEMA-PREFIX` (append a schema name),
//! `S3=s3://BUCKET?endpoint=…` (append a prefix after the bucket), `AWS_ACCESS_KEY_ID=…`,
//! `AWS_SECRET_ACCESS_KEY=…`, then `ready`. Requests, one per line:
//! - `bytes PREFIX`: the objects under PREFIX of the bucket, printed as `OBJECTS BYTES`.

use std::io::BufRead;

use presso_meta::postgres::test_server::TestServer as Postgres;
use presso_objects::test_server::{TestServer as S3, ACCESS_KEY, SECRET_KEY};
use presso_objects::{ObjectUrl, Objects};

fn main() {
    let postgres = Postgres::start().unwrap_or_else(|e| fail(&e));
    let s3 = S3::start().unwrap_or_else(|e| fail(&e));
    let bucket = S3::fresh_url("scale").bucket;
    let meta = postgres.url("SCHEMA");
    println!("META={}", meta.trim_end_matches("SCHEMA"));
    println!("S3=s3://{bucket}?endpoint={}", s3.endpoint());
    println!("AWS_ACCESS_KEY_ID={ACCESS_KEY}");
    println!("AWS_SECRET_ACCESS_KEY={SECRET_KEY}");
    println!("ready");
    for line in std::io::stdin().lock().lines().map_while(Result::ok) {
        match line.split_once(' ') {
            Some(("bytes", prefix)) => {
                let url = ObjectUrl {
                    bucket: bucket.clone(),
                    prefix: prefix.trim_matches('/').to_string(),
                };
                let listed = Objects::connect(&url, &s3.options()).and_then(|o| o.list());
                match listed {
                    Ok(objects) => {
                        let bytes: u64 = objects.iter().map(|(_, size)| size).sum();
                        println!("{} {bytes}", objects.len());
                    }
                    Err(e) => println!("error {e}"),
                }
            }
            _ => println!("error unknown request {line:?}"),
        }
    }
    drop(s3);
    drop(postgres);
}

fn fail(why: &str) -> ! {
    eprintln!("scale_servers: {why}");
    std::process::exit(1)
}
