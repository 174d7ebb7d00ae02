//! The end-to-end tests' machines: libvirt (started here, since no init system runs services),
//! sushy-tools' Redfish emulator on loopback, QEMU domains under software emulation (defined here
//! for bare-metal hosts, or by capstan's KVM provider, whose leftovers [`KvmLeftovers`] removes),
//! and `capstan serve` itself.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use capstan_testkit::libvirt::POOL_DIR;
pub use capstan_testkit::libvirt::{Libvirt, URI, virsh};
use capstan_testkit::until;
/// The storage pool of the bare-metal VMs' disks and of capstan's KVM volumes.
pub const POOL: &str = "default";
/// The single system of `sushy-emulator --fake`.
pub const FAKE_SYSTEM: &str = "27946b59-9e44-4fa7-8e91-f3527a1ef094";
// bcrypt of the e2e password (rounds 4), so no hasher is needed here.
const PASSWORD_BCRYPT: &str = "$2b$04$bXdGSmOZDWfHWAKu3x9jrONclTZFze2ah3.osGBAhn7zzEPmVDFm.";

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The names `virsh ARGS` lists (one a line) that start with `prefix`.
fn names_with_prefix(args: &[&str], prefix: &str) -> Vec<String> {
    let (ok, out) = virsh(args);
    assert!(ok, "virsh {args:?}: {out}");
    out.lines()
        .map(str::trim)
        .filter(|l| l.starts_with(prefix))
        .map(str::to_owned)
        .collect()
}

/// Every domain, running or not, whose name starts with `prefix` (`virsh list --all`).
pub fn domains_with_prefix(prefix: &str) -> Vec<String> {
    names_with_prefix(&["list", "--all", "--name"], prefix)
}

/// Every volume of the pool whose name starts with `prefix` (`virsh vol-list`).
pub fn volumes_with_prefix(prefix: &str) -> Vec<String> {
    let (ok, out) = virsh(&["vol-list", POOL]);
    assert!(ok, "virsh vol-list {POOL}: {out}");
    // `vol-list` prints a header, then "NAME  PATH" rows.
    out.lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| name.starts_with(prefix))
        .map(str::to_owned)
        .collect()
}

/// What capstan's KVM provider makes for a test's machines (domains and volumes whose names start
/// with `prefix`, the base image volumes named here): removed when dropped, so that a failed test
/// leaves no VM running and no volume in the pool. A passing test has checked that capstan
/// removed them itself before.
pub struct KvmLeftovers {
    pub prefix: String,
    pub base_volumes: Vec<String>,
}

impl Drop for KvmLeftovers {
    fn drop(&mut self) {
        self.remove();
    }
}

impl KvmLeftovers {
    /// Stops and removes the domains, their console logs and the volumes.
    pub fn remove(&self) {
        let listed = virsh(&["list", "--all", "--name"]).1;
        for domain in listed.lines().map(str::trim) {
            if domain.starts_with(&self.prefix) {
                let _ = virsh(&["destroy", domain]);
                let _ = virsh(&["undefine", domain, "--nvram"]);
                let _ = virsh(&["undefine", domain]);
                let _ = std::fs::remove_file(format!("/var/log/libvirt/qemu/{domain}-console.log"));
            }
        }
        let listed = virsh(&["vol-list", POOL]).1;
        for volume in listed.lines().filter_map(|l| l.split_whitespace().next()) {
            if volume.starts_with(&self.prefix) || self.base_volumes.iter().any(|b| b == volume) {
                let _ = virsh(&["vol-delete", volume, "--pool", POOL]);
            }
        }
    }
}

/// The last `n` lines of a console log, for a failure message.
pub fn last_lines(log: &str, n: usize) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Kills `pid` once `limit` has passed, unless dropped first.
pub struct Watchdog(Option<std::sync::mpsc::Sender<()>>);

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.take();
    }
}

pub fn kill_after(pid: u32, limit: Duration) -> Watchdog {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(limit) {
            let _ = Command::new("kill")
                .arg(pid.to_string())
                .stderr(Stdio::null())
                .status();
        }
    });
    Watchdog(Some(tx))
}

/// A sushy-emulator on loopback with basic auth: libvirt-backed, or `--fake` when `fake_port`
/// asks for a fixed port.
pub struct Sushy {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Sushy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Sushy {
    pub fn start(_libvirt: &Libvirt, user: &str, password: &str, fake_port: Option<u16>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            password,
            super::PASSWORD,
            "the htpasswd entry is for the e2e password"
        );
        let htpasswd = dir.path().join("htpasswd");
        std::fs::write(&htpasswd, format!("{user}:{PASSWORD_BCRYPT}\n")).unwrap();
        let config = dir.path().join("sushy.conf");
        std::fs::write(
            &config,
            format!(
                "SUSHY_EMULATOR_AUTH_FILE = r'{}'\nSUSHY_EMULATOR_STATE_DIR = r'{}'\nSUSHY_EMULATOR_LIBVIRT_URI = '{URI}'\n",
                htpasswd.display(),
                dir.path().join("state").display()
            ),
        )
        .unwrap();
        let port = fake_port.unwrap_or_else(free_port);
        let mut command = Command::new("sushy-emulator");
        if fake_port.is_some() {
            command.arg("--fake");
        } else {
            command.args(["--libvirt-uri", URI]);
        }
        let log = std::fs::File::create(dir.path().join("sushy.log")).unwrap();
        let child = command
            .args([
                "--interface",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "--config",
            ])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("sushy-emulator (run scripts/install-deps.sh)");
        let sushy = Self {
            child,
            port,
            _dir: dir,
        };
        let answered = until(Duration::from_secs(30), || {
            Command::new("curl")
                .args([
                    "-sf",
                    "-u",
                    &format!("{user}:{password}"),
                    &format!("http://127.0.0.1:{port}/redfish/v1/Systems"),
                ])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        });
        assert!(answered, "sushy-emulator did not answer on port {port}");
        sushy
    }

    pub fn system_address(&self, uuid: &str) -> String {
        format!(
            "redfish-virtualmedia+http://127.0.0.1:{}/redfish/v1/Systems/{uuid}",
            self.port
        )
    }
}

/// A QEMU domain (TCG) with a virtio disk, a user-mode virtio NIC and a serial log.
pub struct Vm {
    pub name: String,
    pub uuid: String,
    pub mac: String,
    pub memory_mib: u32,
    pub disk_gib: u64,
    serial: PathBuf,
    disk: PathBuf,
}

impl Drop for Vm {
    fn drop(&mut self) {
        let _ = virsh(&["destroy", &self.name]);
        let _ = virsh(&["undefine", &self.name]);
        let _ = std::fs::remove_file(&self.disk);
        // The disk was made beside libvirt, not through it: the pool forgets it on a refresh.
        let _ = virsh(&["pool-refresh", POOL]);
    }
}

/// How a [`Vm`]'s NIC reaches the host.
#[derive(Clone, Copy, Debug)]
pub enum Nic<'a> {
    /// QEMU's user-mode network: the guest alone behind NAT, the host's loopback at 10.0.2.2.
    User,
    /// A port on a [`Bridge`] of the test's network namespace (by the bridge's name).
    Bridge(&'a str),
}

/// A [`Vm`]'s size.
#[derive(Clone, Copy, Debug)]
pub struct VmShape {
    pub memory_mib: u32,
    pub vcpus: u32,
    pub disk_gib: u64,
}

impl Vm {
    /// A one-vCPU machine on the user-mode network.
    pub fn define(
        libvirt: &Libvirt,
        work: &Path,
        name: &str,
        memory_mib: u32,
        disk_gib: u64,
        mac: &str,
    ) -> Self {
        let shape = VmShape {
            memory_mib,
            vcpus: 1,
            disk_gib,
        };
        Self::define_with(libvirt, work, name, shape, mac, Nic::User)
    }

    pub fn define_with(
        _libvirt: &Libvirt,
        work: &Path,
        name: &str,
        shape: VmShape,
        mac: &str,
        nic: Nic<'_>,
    ) -> Self {
        let VmShape {
            memory_mib,
            vcpus,
            disk_gib,
        } = shape;
        let interface = match nic {
            Nic::User => "<interface type='user'>".to_owned(),
            Nic::Bridge(bridge) => {
                format!("<interface type='bridge'>\n      <source bridge='{bridge}'/>")
            }
        };
        // A leftover from an interrupted run would hold the name.
        let _ = virsh(&["destroy", name]);
        let _ = virsh(&["undefine", name]);
        let disk = PathBuf::from(POOL_DIR).join(format!("{name}.qcow2"));
        let _ = std::fs::remove_file(&disk);
        let status = Command::new("qemu-img")
            .args(["create", "-q", "-f", "qcow2"])
            .arg(&disk)
            .arg(format!("{disk_gib}G"))
            .status()
            .unwrap();
        assert!(status.success());
        let logs = work.join("serial");
        std::fs::create_dir_all(&logs).unwrap();
        let serial = logs.join(format!("{name}.log"));
        let xml = format!(
            r#"<domain type='qemu'>
  <name>{name}</name>
  <memory unit='MiB'>{memory_mib}</memory>
  <vcpu>{vcpus}</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type><boot dev='hd'/></os>
  <features><acpi/></features>
  <on_reboot>restart</on_reboot>
  <devices>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source file='{disk}'/>
      <target dev='vda' bus='virtio'/>
    </disk>
    {interface}
      <mac address='{mac}'/>
      <model type='virtio'/>
    </interface>
    <serial type='file'>
      <source path='{serial}' append='on'/>
      <target port='0'/>
    </serial>
  </devices>
</domain>
"#,
            disk = disk.display(),
            serial = serial.display()
        );
        let file = work.join(format!("{name}.xml"));
        std::fs::write(&file, xml).unwrap();
        let (ok, out) = virsh(&["define", file.to_str().unwrap()]);
        assert!(ok, "{out}");
        let (ok, uuid) = virsh(&["domuuid", name]);
        assert!(ok, "{uuid}");
        Self {
            name: name.to_owned(),
            uuid: uuid.trim().to_owned(),
            mac: mac.to_owned(),
            memory_mib,
            disk_gib,
            serial,
            disk,
        }
    }

    pub fn serial(&self) -> String {
        std::fs::read(&self.serial)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// Waits until the serial log contains `pattern` (the console is the VM's only voice).
    pub fn wait_for_serial(&self, pattern: &str, limit: Duration) {
        let found = until(limit, || self.serial().contains(pattern));
        let tail = last_lines(&self.serial(), 40);
        assert!(
            found,
            "{}: no {pattern:?} on the console within {limit:?}; last lines:\n{tail}",
            self.name
        );
    }

    pub fn state(&self) -> String {
        virsh(&["domstate", &self.name]).1.trim().to_owned()
    }
}

/// A `capstan serve` process, logging at debug level to a file.
pub struct Serve {
    child: Child,
    pub kubeconfig: PathBuf,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Serve {
    pub fn start(capstan: &Path, data: &Path, extra: &[String], log: &Path) -> Self {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let mut child = Command::new(capstan)
            .arg("serve")
            .arg("--data-dir")
            .arg(data)
            .args(["--listen", &format!("127.0.0.1:{}", free_port())])
            .args(extra)
            .env(
                "CAPSTAN_LOG",
                // CAPSTAN_E2E_SERVE_LOG widens it (e.g. `hyper_util=debug`) when a run is studied.
                std::env::var("CAPSTAN_E2E_SERVE_LOG").unwrap_or_else(|_| {
                    "debug,kube=info,hyper=info,tower=info,h2=info,rustls=info".to_owned()
                }),
            )
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.contains("ready at"), "capstan serve: {line:?}");
        Self {
            child,
            kubeconfig: data.join("kubeconfig"),
        }
    }

    /// The CPU time the process has used so far (user and system, from `/proc/PID/stat`).
    pub fn cpu_seconds(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap();
        // The fields after the command's closing parenthesis; utime and stime are the 12th and
        // 13th of them, in clock ticks (100 a second on Linux).
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .unwrap()
            .1
            .split_whitespace()
            .collect();
        let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        ticks as f64 / 100.0
    }

    /// SIGKILL: no chance to clean up, as in a crash.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait.
    pub fn stop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let watchdog = kill_after(self.child.id(), Duration::from_secs(30));
        let _ = self.child.wait();
        drop(watchdog);
    }
}

/// Runs `command` with no stdin and returns its stdout, failing the test with its output unless it
/// succeeds.
pub fn run_ok(command: &mut Command) -> String {
    let shown = format!("{command:?}");
    let out = command.stdin(Stdio::null()).output().unwrap();
    assert!(
        out.status.success(),
        "{shown}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Writes the NoCloud seed in `seed` (a directory that may hold more files for the guest) and
/// makes it the `cidata` ISO `iso`: `meta_data`, the network config when given, and user data that
/// writes `script` to `script_path` and runs it.
pub fn nocloud_seed(
    seed: &Path,
    iso: &Path,
    meta_data: &str,
    network_config: Option<&str>,
    script_path: &str,
    script: &str,
) {
    std::fs::create_dir_all(seed).unwrap();
    std::fs::write(seed.join("meta-data"), meta_data).unwrap();
    if let Some(network_config) = network_config {
        std::fs::write(seed.join("network-config"), network_config).unwrap();
    }
    let indented: String = script.lines().map(|l| format!("      {l}\n")).collect();
    std::fs::write(
        seed.join("user-data"),
        format!(
            "#cloud-config\nwrite_files:\n  - path: {script_path}\n    permissions: '0755'\n    content: |\n{indented}runcmd:\n  - [bash, {script_path}]\n"
        ),
    )
    .unwrap();
    run_ok(
        Command::new("xorriso")
            .args(["-as", "mkisofs", "-quiet", "-V", "cidata", "-J", "-r", "-o"])
            .arg(iso)
            .arg(seed),
    );
}

/// A qcow2 overlay `disk` on `base`, grown to `size` (`8G`) when given, so a test never writes to
/// the image it checks.
pub fn qcow2_overlay(base: &Path, disk: &Path, size: Option<&str>) {
    let mut command = Command::new("qemu-img");
    command
        .args(["create", "-q", "-f", "qcow2", "-F", "qcow2", "-b"])
        .arg(base)
        .arg(disk);
    if let Some(size) = size {
        command.arg(size);
    }
    run_ok(&mut command);
}

/// A Linux bridge with a host address, and dnsmasq on it handing each listed MAC its fixed address
/// with the host as the default gateway (kubeadm picks a node's address from its default route):
/// the machines of a test see each other and the host as machines on one LAN do. Made in the
/// test's own network namespace only ([`Bridge::start`] refuses the machine's), and removed when
/// dropped.
pub struct Bridge {
    pub name: String,
    /// The host's address on the bridge.
    pub host: String,
    dnsmasq: Child,
    dir: tempfile::TempDir,
}

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = self.dnsmasq.kill();
        let _ = self.dnsmasq.wait();
        let _ = Command::new("ip")
            .args(["link", "del", &self.name])
            .stderr(Stdio::null())
            .status();
    }
}

impl Bridge {
    /// `name` with `host/24`, leasing `leases` (MAC, address) in the same /24.
    pub fn start(name: &str, host: &str, leases: &[(&str, &str)]) -> Self {
        // Only in a network namespace of the test's own: one whose interfaces are loopback and
        // what the tests themselves made (their bridges, libvirt's taps), never the machine's.
        // (/proc/self/net/dev is this namespace's; /sys/class/net is that of whoever mounted /sys.)
        let foreign: Vec<String> = std::fs::read_to_string("/proc/self/net/dev")
            .unwrap()
            .lines()
            .skip(2)
            .filter_map(|l| Some(l.split_once(':')?.0.trim().to_owned()))
            .filter(|n| n != "lo" && !n.starts_with("capstan-") && !n.starts_with("vnet"))
            .collect();
        assert!(
            foreign.is_empty(),
            "this test makes a bridge and a DHCP server: run it in a network namespace of its own \
             (scripts/test.sh does: unshare --net), not in one with {foreign:?}"
        );
        let _ = Command::new("ip")
            .args(["link", "del", name])
            .stderr(Stdio::null())
            .status();
        run_ok(Command::new("ip").args(["link", "add", name, "type", "bridge"]));
        run_ok(Command::new("ip").args(["addr", "add", &format!("{host}/24"), "dev", name]));
        run_ok(Command::new("ip").args(["link", "set", name, "up"]));
        let dir = tempfile::tempdir().unwrap();
        let prefix = host.rsplit_once('.').unwrap().0;
        let mut dnsmasq = Command::new("dnsmasq");
        dnsmasq
            .args(["--keep-in-foreground", "--conf-file=/dev/null", "--port=0"])
            .args(["--bind-interfaces", "--except-interface=lo"])
            .arg(format!("--interface={name}"))
            .arg(format!("--listen-address={host}"))
            .arg(format!("--dhcp-range={prefix}.100,{prefix}.200,12h"))
            .arg(format!("--dhcp-option=option:router,{host}"))
            .arg(format!(
                "--dhcp-leasefile={}",
                dir.path().join("leases").display()
            ))
            .arg(format!("--pid-file={}", dir.path().join("pid").display()))
            .arg("--log-dhcp")
            .arg(format!(
                "--log-facility={}",
                dir.path().join("dnsmasq.log").display()
            ));
        for (mac, address) in leases {
            dnsmasq.arg(format!("--dhcp-host={mac},{address}"));
        }
        let dnsmasq = dnsmasq
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Self {
            name: name.to_owned(),
            host: host.to_owned(),
            dnsmasq,
            dir,
        }
    }

    /// What dnsmasq logged (its DHCP exchanges), for a failure message.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("dnsmasq.log")).unwrap_or_default()
    }
}
