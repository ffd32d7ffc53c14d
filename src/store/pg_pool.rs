//! A small Postgres connection pool: at most `size` connections, opened on demand, reused while
//! they stay open. Every replica of the daemon holds one; the database's `max_connections` must
//! cover `replicas × pool_size`.

use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};
use tokio_postgres::{Client, Config};

use super::pg_tls::{self, MakeRustls};
use super::StoreError;
use crate::domain::error_chain::with_causes;
use crate::domain::secret::redact_url;

/// How long opening one connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

pub(super) struct Pool {
    config: Config,
    tls: MakeRustls,
    /// Where the pool connects, with any password removed (for messages).
    pub location: String,
    idle: Mutex<Vec<Client>>,
    permits: Semaphore,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("location", &self.location)
            .finish()
    }
}

/// A connection on loan; back to the pool when dropped, unless it was closed.
pub(super) struct Conn<'a> {
    client: Option<Client>,
    pool: &'a Pool,
    _permit: SemaphorePermit<'a>,
}

impl std::ops::Deref for Conn<'_> {
    type Target = Client;
    fn deref(&self) -> &Client {
        self.client.as_ref().expect("present until drop")
    }
}

impl std::ops::DerefMut for Conn<'_> {
    fn deref_mut(&mut self) -> &mut Client {
        self.client.as_mut().expect("present until drop")
    }
}

impl Drop for Conn<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.client.take() {
            if !c.is_closed() {
                self.pool.idle.lock().expect("pool poisoned").push(c);
            }
        }
    }
}

impl Pool {
    /// Parses `url` (`postgres://user:password@host:port/db?options`, or `host=/run/postgresql`
    /// for a Unix socket) and reads any `sslrootcert`; connects nothing yet.
    pub fn new(url: &str, size: usize) -> Result<Pool, StoreError> {
        let location = redact_url(url);
        let refused = |message: String| StoreError::Open {
            path: location.clone(),
            message,
        };
        let (rest, tls) = pg_tls::split_options(url).map_err(refused)?;
        let mut config: Config = rest
            .parse()
            .map_err(|e| refused(format!("not a Postgres connection URL: {e}")))?;
        config.ssl_mode(tls.mode.for_driver(&config));
        let tls = MakeRustls::new(&tls).map_err(refused)?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("gavel");
        }
        Ok(Pool {
            config,
            tls,
            location,
            idle: Mutex::new(Vec::new()),
            permits: Semaphore::new(size.max(1)),
        })
    }

    /// A connection: an idle one, or a new one when none is idle and the pool is not full.
    pub async fn get(&self) -> Result<Conn<'_>, StoreError> {
        let permit = self
            .permits
            .acquire()
            .await
            .expect("the semaphore is never closed");
        let reused = {
            let mut idle = self.idle.lock().expect("pool poisoned");
            idle.retain(|c| !c.is_closed());
            idle.pop()
        };
        let client = match reused {
            Some(c) => c,
            None => self.connect().await?,
        };
        Ok(Conn {
            client: Some(client),
            pool: self,
            _permit: permit,
        })
    }

    async fn connect(&self) -> Result<Client, StoreError> {
        let (client, connection) =
            self.config
                .connect(self.tls.clone())
                .await
                .map_err(|e| StoreError::Open {
                    path: self.location.clone(),
                    message: format!("cannot connect: {}", describe(&e)),
                })?;
        // The connection task drives the socket; it ends when the client is dropped or the
        // server goes away (the client then reports `is_closed`).
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!(error = %describe(&e), "postgres connection closed");
            }
        });
        Ok(client)
    }
}

/// A driver error with its causes (the top-level text alone is often just "db error").
pub(super) fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{}: {}", db.severity(), db.message());
    }
    with_causes(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_urls_are_refused_without_the_password() {
        let e = Pool::new("postgres://u:pw@host:notaport/db", 2)
            .expect_err("refused")
            .to_string();
        assert!(e.contains("not a Postgres connection URL"), "{e}");
        assert!(!e.contains("pw@"), "{e}");
    }
}
