{
  # clink for machines with Nix: the `clink` package, an app per gate with
  # the tools that gate needs, a dev shell with all of them, and a check that
  # runs the repository's own shape test (harness/tests/flake_shape.rs).
  #
  # Our own machines have no Nix network: there the flake is only parsed
  # (nix-instantiate --parse, by the shape test in CI); nothing in it has
  # been evaluated or built. Every gate also runs without Nix.
  #
  # Known before any real run: nixos-24.05's Rust is older than the
  # workspace's rust-version (1.89) and Cargo.lock format 4, so building clink
  # at this pin (the package, the check, the gates' cargo build) fails until
  # the lock moves to a nixpkgs with Rust 1.89 or newer (README, "With Nix").
  #
  # The TLA+ jar is not taken from nixpkgs (its tlaplus is another TLC):
  # apps with `fetch = true` run gates/fetch-tools first, which installs the
  # jar formal/tools.env pins by SHA-256.
  description = "clink-rs: a verification harness and gate framework for a streaming engine";

  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-24.05";

  outputs = { self, nixpkgs }:
    let
      systems = [ "x86_64-linux" "aarch64-linux" ];
      forAll = f: nixpkgs.lib.genAttrs systems (system: f nixpkgs.legacyPackages.${system});
      version = (builtins.fromTOML (builtins.readFile ./Cargo.toml)).workspace.package.version;

      # On PATH for every app and in the dev shell: the gates are bash
      # scripts that build clink with cargo (gcc is the linker).
      common = pkgs: with pkgs; [ bash coreutils gnugrep gnused cargo rustc gcc git ];

      # One line per gate a user runs. The app of the same name runs
      # gates/<name> from the repository root with `common` and `tools` on
      # PATH; `fetch = true` runs gates/fetch-tools first. The shape test
      # reads this table, so keep it a plain attribute set of literals.
      # Every gate a user runs has its line here.
      gates = pkgs: with pkgs; {
        incident-gate = { fetch = true; tools = [ jdk17_headless python3 python3Packages.pip util-linux ]; };
        formal-check = { fetch = true; tools = [ jdk17_headless python3 python3Packages.pip ]; };
        example-job = { fetch = false; tools = [ ]; };
        fetch-tools = { fetch = false; tools = [ jdk17_headless python3 python3Packages.pip ]; };
        regression-sensitivity = { fetch = false; tools = [ python3 ]; };
        services = { fetch = false; tools = [ clickhouse apacheKafka python3 ]; };
        bench = { fetch = true; tools = [ jdk17_headless python3 python3Packages.pip ]; };
        upgrade-gate = { fetch = false; tools = [ python3 util-linux ]; };
        reconcile-gate = { fetch = false; tools = [ clickhouse apacheKafka python3 ]; };
      };

      app = pkgs: name: gate: {
        type = "app";
        program = toString (pkgs.writeShellScript "clink-${name}" ''
          set -eu
          if [ ! -x ./gates/${name} ]; then
            echo "clink-${name}: run this from the root of a clink-rs checkout" >&2
            exit 2
          fi
          # The pinned tools first; the caller's PATH after them, for anything
          # a gate uses that the table does not name.
          export PATH=${pkgs.lib.makeBinPath (common pkgs ++ gate.tools)}:$PATH
          ${pkgs.lib.optionalString gate.fetch "./gates/fetch-tools"}
          exec ./gates/${name} "$@"
        '');
      };

      # clink itself, from Cargo.lock. Its tests run in CI and in
      # checks.flake-shape, not in the package build.
      clink = pkgs: extra: pkgs.rustPlatform.buildRustPackage ({
        pname = "clink";
        inherit version;
        src = ./.;
        cargoLock.lockFile = ./Cargo.lock;
        cargoBuildFlags = [ "-p" "clink-harness" "--bin" "clink" ];
        doCheck = false;
        meta.mainProgram = "clink";
      } // extra);
    in {
      packages = forAll (pkgs: { default = clink pkgs { }; });

      apps = forAll (pkgs: pkgs.lib.mapAttrs (app pkgs) (gates pkgs));

      devShells = forAll (pkgs: {
        default = pkgs.mkShell {
          packages = pkgs.lib.unique (common pkgs ++ pkgs.lib.concatMap (g: g.tools) (builtins.attrValues (gates pkgs)));
        };
      });

      checks = forAll (pkgs: {
        # The shape test in the build sandbox: it only parses (nix-instantiate
        # --parse with the dummy store), so it needs no network and no daemon.
        flake-shape = clink pkgs {
          pname = "clink-flake-shape";
          doCheck = true;
          cargoTestFlags = [ "-p" "clink-harness" "--test" "flake_shape" ];
          nativeCheckInputs = [ pkgs.nix ];
          preCheck = "export HOME=$TMPDIR";
        };
      });
    };
}
