# The stand-in package set harness/tests/flake_eval.rs evaluates the flake's
# `outputs` against, and the call itself. Used with
#   nix-instantiate --eval --strict --json THIS --argstr flakeDir DIR
# It must never need a fetch or a real store path: every package is a name
# and a made-up store path, every builder returns its arguments.
#
# It provides exactly what flake.nix uses, no more: `provided` lists every
# attribute it offers (its leaves), and each use of one is traced
# (`clink-standin {"use": PATH}` on stderr), so the test can require that
# every attribute offered was used and every attribute used was offered (an
# attribute it lacks fails the evaluation). writeShellScript traces each
# script it writes with its text, since an app's program is only its path.
{ flakeDir }:
let
  note = what: value: builtins.trace "clink-standin ${builtins.toJSON what}" value;

  # A package: a name and a store path of its own, nothing to build.
  pkg = system: name: {
    type = "derivation";
    inherit name;
    outPath = "/nix/store/standin-${system}-${name}";
  };

  pkgsFor = system:
    let p = pkg system; in {
      lib = {
        makeBinPath = ps: builtins.concatStringsSep ":" (map (x: "${x}/bin") ps);
        optionalString = cond: s: if cond then s else "";
        mapAttrs = builtins.mapAttrs;
        unique = builtins.foldl' (acc: e: if builtins.elem e acc then acc else acc ++ [ e ]) [ ];
        concatMap = builtins.concatMap;
      };
      writeShellScript = name: text:
        let out = p "script-${name}"; in
        note { writeShellScript = name; inherit text; path = out.outPath; } (out // { inherit text; });
      # Its arguments, with the paths the flake hands it written out (a path
      # printed as JSON would be copied to the store).
      rustPlatform.bindgenHook = p "rustPlatform.bindgenHook";
      rustPlatform.buildRustPackage = attrs:
        attrs // {
          src = toString attrs.src;
          cargoLock = attrs.cargoLock // { lockFile = toString attrs.cargoLock.lockFile; };
        } // p "${attrs.pname}-${attrs.version}";
      mkShell = attrs: attrs // p "shell";
      python3Packages.pip = p "python3Packages.pip";
    } // builtins.listToAttrs (map (name: { inherit name; value = p name; }) [
      "bash" "coreutils" "gawk" "gnugrep" "gnused" "cargo" "rustc" "gcc" "git" "nix"
      "jdk17_headless" "python3" "util-linux" "clickhouse" "apacheKafka" "seaweedfs" "rocksdb"
    ]);

  systems = [ "x86_64-linux" "aarch64-linux" ];
  raw = {
    nixpkgs = {
      lib.genAttrs = names: f: builtins.listToAttrs (map (n: { name = n; value = f n; }) names);
      legacyPackages = builtins.listToAttrs (map (s: { name = s; value = pkgsFor s; }) systems);
    };
    self.outPath = flakeDir;
  };

  # A leaf: anything but a plain attribute set (a package is a leaf).
  isLeaf = v: !(builtins.isAttrs v) || v ? outPath;
  tracked = prefix: set: builtins.mapAttrs
    (n: v: let path = "${prefix}.${n}"; in if isLeaf v then note { use = path; } v else tracked path v)
    set;
  leaves = prefix: set: builtins.concatLists (builtins.attrValues (builtins.mapAttrs
    (n: v: let path = "${prefix}.${n}"; in if isLeaf v then [ path ] else leaves path v)
    set));

  flake = import (/. + flakeDir + "/flake.nix");
  outputs = flake.outputs {
    nixpkgs = tracked "nixpkgs" raw.nixpkgs;
    self = tracked "self" raw.self;
  };

  # The outputs as JSON can show them: a derivation as its attributes and
  # its store path as `path` (JSON prints a set with an outPath as that path
  # alone), a function as a marker, a path as text.
  dump = v:
    let t = builtins.typeOf v; in
    if t == "set" then
      (if (v.type or null) == "derivation"
       then { derivation = builtins.mapAttrs (_: dump) (removeAttrs v [ "type" "outPath" ]) // { path = v.outPath; }; }
       else builtins.mapAttrs (_: dump) v)
    else if t == "list" then map dump v
    else if t == "lambda" then "<function>"
    else if t == "path" then toString v
    else v;
in {
  provided = leaves "nixpkgs" raw.nixpkgs ++ leaves "self" raw.self;
  outputs = dump outputs;
}
