//! Hello world over RMI: a server member exports a `Hello` object and binds it in the
//! naming registry; a client member looks it up and calls it. Both members run in this
//! process (two Ibis instances in one pool), over the transport the IPL negotiates
//! (`IPL_TRANSPORT=tcp` to force TCP).
//!
//! Usage: `rmi-hello [NAME]` (`--help`). Prints the reply.

#![forbid(unsafe_code)]

use clap::Parser;
use ibis_rmi::{remote, Rmi, RmiError};

/// Hello world over RMI: a server and a client member in this process.
#[derive(Parser)]
#[command(name = "rmi-hello")]
struct Args {
    /// Whom the server greets.
    #[arg(default_value = "world")]
    name: String,
}

/// The remote interface.
#[remote]
trait Hello {
    /// Greets `who`.
    fn greet(&self, who: String) -> Result<String, RmiError>;
}

/// The server's object.
struct Greeter {
    member: String,
}

impl Hello for Greeter {
    fn greet(&self, who: String) -> Result<String, RmiError> {
        Ok(format!("Hello, {who}! (from {})", self.member))
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    ipl_tools::init_tracing("warn");
    let who = Args::parse().name;
    let registry = ipl::EmbeddedRegistry::new();
    let secret = ipl_auth::PoolSecret::generate()?;
    let member = |name: &str| -> Result<Rmi, Box<dyn std::error::Error>> {
        let ibis = ibis_rmi::ibis_builder()?
            .pool("rmi-hello")
            .name(name)
            .registry(&registry)
            .secret(secret.clone())
            .build()?;
        Ok(Rmi::start(ibis)?)
    };

    let server = member("server")?;
    let obj = server.export(HelloSkeleton::new(Greeter {
        member: server.identifier().to_string(),
    }))?;
    server.bind("hello", &obj)?;

    let client = member("client")?;
    let hello = client.lookup::<dyn Hello>("hello")?;
    ibis_apps::out!("{}", hello.greet(who)?);
    ibis_apps::out!(
        "transport: {}",
        client.ibis().transport_for(&ibis_rmi::port_type()?)?
    );

    client.end();
    server.end();
    Ok(())
}
