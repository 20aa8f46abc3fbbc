//! The fake upstreams behind `tollgate demo` (its mock for providers without a key) and
//! `tollgate fake-upstream`, when this build has them: the `fakes` feature, on by default.
//! Without it the binary carries no fake and both commands fail, saying why.

#[cfg(feature = "fakes")]
pub use built_in::{FakeArgs, Mock, serve};
#[cfg(not(feature = "fakes"))]
pub use missing::{FakeArgs, Mock, serve};

#[cfg(feature = "fakes")]
mod built_in {
    use anyhow::{Context as _, Result};

    pub use fake_upstream::FakeArgs;

    /// The demo's stand-in for every provider without a key.
    pub struct Mock(fake_upstream::RunningFake);

    impl Mock {
        /// Starts on a free loopback port.
        pub fn start() -> Result<Mock> {
            // Agent clients (Claude Code, Codex, the SDKs' tool loops) get a tool call, then text.
            let config = fake_upstream::FakeConfig {
                agent: true,
                ..fake_upstream::FakeConfig::default()
            };
            let running = fake_upstream::start(config, ([127, 0, 0, 1], 0).into(), 1)
                .context("starting the mock upstream")?;
            Ok(Mock(running))
        }

        pub fn base_url(&self) -> String {
            self.0.base_url()
        }

        pub async fn stop(self) {
            self.0.stop().await;
        }
    }

    /// Runs the standalone fake upstream until SIGINT/SIGTERM.
    pub async fn serve(args: &FakeArgs) -> Result<()> {
        Ok(fake_upstream::serve(args).await?)
    }
}

#[cfg(not(feature = "fakes"))]
mod missing {
    use anyhow::{Result, bail};

    const NO_FAKES: &str = "this build of tollgate has no fake upstreams: `demo` and \
                            `fake-upstream` need the `fakes` feature (on by default)";

    /// Whatever `tollgate fake-upstream` was given, so that it reaches its error rather than a
    /// usage message.
    #[derive(Debug, clap::Args)]
    pub struct FakeArgs {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
        args: Vec<String>,
    }

    /// None can exist: `start` always fails.
    pub enum Mock {}

    impl Mock {
        pub fn start() -> Result<Mock> {
            bail!(NO_FAKES)
        }

        pub fn base_url(&self) -> String {
            match *self {}
        }

        pub fn stop(self) -> std::future::Ready<()> {
            match self {}
        }
    }

    pub async fn serve(_: &FakeArgs) -> Result<()> {
        bail!(NO_FAKES)
    }
}
