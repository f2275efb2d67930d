{
  # clink for machines with Nix: the `clink` package (bin/clink and
  # bin/clink-reference-audit, built from Cargo.lock), an app per gate that
  # runs that package's binaries with the gate's tools on PATH, a dev shell
  # with all of them, and a check that runs the flake's own tests in the
  # build sandbox.
  #
  # What has run here (README, "With Nix"): CI parses this file
  # (harness/tests/flake_shape.rs), evaluates `outputs` against a stand-in
  # package set (harness/tests/flake_eval.rs), and builds the package in a
  # stand-in of Nix's build sandbox (gates/sandbox-build: only what the
  # derivation names, no /usr/bin/env, no network). Nothing in it has been
  # built or run against the real nixpkgs. Every gate also runs without Nix.
  #
  # The TLA+ jar is not taken from nixpkgs (its tlaplus is another TLC):
  # apps with `fetch = true` run gates/fetch-tools first, which installs the
  # jar formal/tools.env pins by SHA-256.
  description = "clink-rs: a verification harness and gate framework for a streaming engine";

  # The Rust the pinned revision ships, as the `rust-at-pin:` line below
  # records it for the revision flake.lock pins. harness/tests/min_rust.rs
  # reads that line: it fails when the workspace or a locked dependency
  # needs a newer Rust (cargo metadata), and when the line names another
  # branch or revision than flake.lock, so moving the lock means reading the
  # Rust of the new revision again. Where 1.91.1 comes from (read with the
  # public code and issue search, not by evaluating nixpkgs here):
  #   - nixpkgs pkgs/development/compilers/rust/1_91.nix: rustcVersion
  #     "1.91.1" (a stored copy, not read at the pinned revision;
  #     NixOS/nixpkgs#460575, rust 1.91.0 -> 1.91.1, 2025-11-11); the next
  #     bump, #470993 to 1.92.0 (2025-12-15), is no 25.11 backport, and none
  #     to 25.11 was found;
  #   - anthrofract/majjit#10 (2026-04-24, two weeks before the pinned
  #     revision): a user of NixOS 25.11 has "only rustc 1.91.1 available".
  # rust-at-pin: 1.91.1 nixos-25.11 8fd9daa3db09ced9700431c5b7ad0e8ba199b575
  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-25.11";

  outputs = { self, nixpkgs }:
    let
      systems = [ "x86_64-linux" "aarch64-linux" ];
      forAll = f: nixpkgs.lib.genAttrs systems (system: f nixpkgs.legacyPackages.${system});
      version = (builtins.fromTOML (builtins.readFile ./Cargo.toml)).workspace.package.version;

      # On PATH for every app and in the dev shell: the gates are bash
      # scripts (gates/lib.sh reads Cargo.toml with awk), and the ones that
      # build test or defect variants (formal, bench, upgrade,
      # regression-sensitivity) build them with cargo (gcc is the linker).
      common = pkgs: with pkgs; [ bash coreutils gawk gnugrep gnused cargo rustc gcc git ];

      # One line per gate a user runs. The app of the same name runs
      # gates/<name> from the flake's source in the store, with `common` and
      # `tools` on PATH; `fetch = true` runs gates/fetch-tools first. The
      # shape test reads this table, so keep it a plain attribute set of
      # literals. Every gate a user runs has its line here.
      gates = pkgs: with pkgs; {
        incident-gate = { fetch = true; tools = [ jdk17_headless python3 python3Packages.pip util-linux ]; };
        formal-check = { fetch = true; tools = [ jdk17_headless python3 python3Packages.pip ]; };
        bundle-mutants = { fetch = true; tools = [ jdk17_headless python3 python3Packages.pip ]; };
        example-job = { fetch = false; tools = [ ]; };
        fetch-tools = { fetch = false; tools = [ jdk17_headless python3 python3Packages.pip ]; };
        regression-sensitivity = { fetch = false; tools = [ python3 ]; };
        services = { fetch = false; tools = [ clickhouse apacheKafka jdk17_headless seaweedfs python3 python3Packages.pip util-linux ]; };
        bench = { fetch = true; tools = [ jdk17_headless python3 python3Packages.pip ]; };
        upgrade-gate = { fetch = false; tools = [ python3 util-linux ]; };
        reconcile-gate = { fetch = false; tools = [ clickhouse apacheKafka jdk17_headless seaweedfs python3 python3Packages.pip util-linux ]; };
        audit-gate = { fetch = false; tools = [ clickhouse apacheKafka jdk17_headless seaweedfs python3 python3Packages.pip util-linux ]; };
      };

      # An app runs the packaged binaries (CLINK_BIN, CLINK_REFERENCE_AUDIT_BIN:
      # each gate checks that they run and are not test builds) and the gates,
      # fixtures and formal files of the flake's own source (`self`), so it
      # works from any directory. Nothing is written under that read-only
      # source: each gate works in a `mktemp -d` directory, and cargo, for the
      # gates that build variants, in CARGO_TARGET_DIR.
      app = pkgs: name: gate: {
        type = "app";
        program = toString (pkgs.writeShellScript "clink-${name}" ''
          set -eu
          # The pinned tools first; the caller's PATH after them, for anything
          # a gate uses that the table does not name.
          export PATH=${pkgs.lib.makeBinPath (common pkgs ++ gate.tools)}:$PATH
          export CLINK_BIN=${package pkgs}/bin/clink
          export CLINK_REFERENCE_AUDIT_BIN=${package pkgs}/bin/clink-reference-audit
          export CARGO_TARGET_DIR="''${CARGO_TARGET_DIR:-''${XDG_CACHE_HOME:-$HOME/.cache}/clink-rs/nix-target}"
          # Snapshots are compared, never written: the source is the store's.
          export INSTA_UPDATE=no
          ${pkgs.lib.optionalString gate.fetch "${self}/gates/fetch-tools"}
          exec ${self}/gates/${name} "$@"
        '');
      };

      # clink itself, from Cargo.lock: the command line and the independent
      # reference audit the reconcile gate runs. Its tests run in CI, not in
      # the package build; checks.flake-shape runs the flake's own tests.
      # gates/services runs the Apache Kafka broker from the jars of the
      # apacheKafka package on PATH (its bin/../libs).
      clink = pkgs: extra: pkgs.rustPlatform.buildRustPackage ({
        pname = "clink";
        inherit version;
        src = self;
        cargoLock.lockFile = ./Cargo.lock;
        cargoBuildFlags = [
          "-p" "clink-harness" "--bin" "clink"
          "-p" "clink-reference-audit" "--bin" "clink-reference-audit"
        ];
        # The native builds in Cargo.lock's tree (rdkafka-sys's bundled
        # librdkafka: ./configure and make; libz-sys, libmimalloc-sys and
        # ring: cc) need nothing beyond stdenv (bash, make, coreutils,
        # sed, grep, awk...) and its C compiler. librocksdb-sys links the
        # system's RocksDB (never its bundled sources: ARCHITECTURE.md,
        # "RocksDB: linked, not built"), found through the two variables in
        # env, and runs bindgen, which needs libclang (bindgenHook).
        # gates/sandbox-build, run by CI, builds this package in a sandbox
        # made of exactly that and reads these lists from here; an input
        # added here must get a line in its table, and
        # harness/tests/flake_eval.rs holds the two equal.
        nativeBuildInputs = [ (pkgs.rustPlatform.bindgenHook) ];
        buildInputs = [ pkgs.rocksdb ];
        env = {
          ROCKSDB_LIB_DIR = "${pkgs.rocksdb}/lib";
          ROCKSDB_INCLUDE_DIR = "${pkgs.rocksdb}/include";
        };
        # librdkafka's ./configure starts with `#!/usr/bin/env bash`, and the
        # build sandbox has no /usr/bin/env: the build script's
        # `./configure` fails with "No such file or directory". cargoSetupHook
        # has made the vendored crates a writable copy by now ($cargoDepsCopy,
        # one directory per crate with cargoLock), so point the scripts at
        # stdenv's bash, as nixpkgs' own librdkafka package does.
        postPatch = ''
          patchShebangs $cargoDepsCopy/rdkafka-sys-*/librdkafka
        '';
        doCheck = false;
        meta.mainProgram = "clink";
      } // extra);
      package = pkgs: clink pkgs { };
    in {
      packages = forAll (pkgs: { default = package pkgs; });

      apps = forAll (pkgs: pkgs.lib.mapAttrs (app pkgs) (gates pkgs));

      devShells = forAll (pkgs: {
        default = pkgs.mkShell {
          packages = pkgs.lib.unique (common pkgs ++ pkgs.lib.concatMap (g: g.tools) (builtins.attrValues (gates pkgs)));
        };
      });

      checks = forAll (pkgs: {
        # The flake's tests in the build sandbox: the shape test parses and
        # the evaluation test evaluates against its stand-in package set
        # (nix-instantiate with the dummy store), so neither needs network or
        # a daemon.
        flake-shape = clink pkgs {
          pname = "clink-flake-shape";
          doCheck = true;
          cargoTestFlags = [ "-p" "clink-harness" "--test" "flake_shape" "--test" "flake_eval" ];
          # python3: flake_eval.rs asks gates/sandbox-build which inputs it
          # binds, and the gate reads the evaluated flake with python3.
          nativeCheckInputs = [ pkgs.nix pkgs.python3 ];
          preCheck = "export HOME=$TMPDIR";
        };
      });
    };
}
