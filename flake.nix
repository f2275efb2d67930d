{
  # The tools the gates need, for machines with Nix. Not tested on our own
  # machines (they have no Nix); every gate runs without Nix as well.
  # The TLA+ jar is not taken from nixpkgs: gates/fetch-tools installs the one
  # formal/tools.env pins by SHA-256, so a Nix run checks the same TLC.
  description = "clink-rs: a verification harness and gate framework for a streaming engine";

  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-24.05";

  outputs = { self, nixpkgs }:
    let
      systems = [ "x86_64-linux" "aarch64-linux" ];
      forAll = f: nixpkgs.lib.genAttrs systems (system: f nixpkgs.legacyPackages.${system});
      tools = pkgs: [ pkgs.cargo pkgs.rustc pkgs.gcc pkgs.jdk17_headless pkgs.python3 pkgs.python3Packages.pip pkgs.util-linux pkgs.git ];
      gate = pkgs: name: {
        type = "app";
        program = toString (pkgs.writeShellScript "clink-${name}" ''
          export PATH=${pkgs.lib.makeBinPath (tools pkgs)}:$PATH
          exec ./gates/${name} "$@"
        '');
      };
    in {
      devShells = forAll (pkgs: { default = pkgs.mkShell { packages = tools pkgs; }; });
      apps = forAll (pkgs: {
        incident-gate = gate pkgs "incident-gate";
        formal-check = gate pkgs "formal-check";
        fetch-tools = gate pkgs "fetch-tools";
      });
    };
}
