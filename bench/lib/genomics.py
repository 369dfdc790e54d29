"""A realistic, reproducible genomics dataset for the pipeline workload (no aligner needed).

From a seed: a random reference genome (a few contigs, 41% GC as in the human genome); reads sampled
at random positions and strands with quality strings drawn from real Illumina reads (the corpus's
reads.fq) and base errors drawn from those qualities (P(error) = 10^(-Q/10), a 'N' at Q <= 2 half
of the time), so the FASTQ looks and compresses like a sequencer's. Two lanes, each written as

    laneN.fq    FASTQ as sequenced (reverse-strand reads reverse-complemented back)
    laneN.sam   the same reads aligned at their true positions (CIGAR nM, NM tag), in sequencing
                order (unsorted), with @SQ/@RG/@PG headers
    laneN.bam   laneN.sam converted by samtools (the input of viewing and sorting)

plus ref.fa and params.json. Generation runs once, outside the timed phases.
"""
import json
import os
import random

import sysutil

COMP = str.maketrans("ACGTN", "TGCAN")


def real_qualities(fastq, limit=200_000):
    """Up to LIMIT distinct quality strings from a FASTQ file (the 4th line of each record)."""
    quals = []
    seen = set()
    with open(fastq, "rb") as f:
        while len(quals) < limit:
            head = f.readline()
            if not head:
                break
            f.readline()
            f.readline()
            q = f.readline().rstrip(b"\r\n").decode("ascii")
            if not head.startswith(b"@") or not q:
                raise ValueError(f"{fastq} is not FASTQ")
            if q not in seen:
                seen.add(q)
                quals.append(q)
    if not quals:
        raise ValueError(f"no reads in {fastq}")
    return quals


def reference(rng, lengths):
    """{contig name: sequence}, 41% GC."""
    out = {}
    for i, n in enumerate(lengths, 1):
        out[f"chr{i}"] = "".join(rng.choices("ACGT", weights=(29.5, 20.5, 20.5, 29.5), k=n))
    return out


def _errors(rng, seq, qual):
    """SEQ with sequencing errors drawn from QUAL; returns (read, mismatches)."""
    bases = list(seq)
    nm = 0
    r = rng.random
    for i, c in enumerate(qual):
        q = ord(c) - 33
        if q <= 2 and r() < 0.5:
            bases[i] = "N"
            nm += 1
        elif r() < 10 ** (-q / 10):
            bases[i] = rng.choice([b for b in "ACGT" if b != bases[i]])
            nm += 1
    return "".join(bases), nm


def generate(out_dir, reads_fq, n_reads, contig_lengths, seed=20190710):
    """Writes the dataset into OUT_DIR (skipped when params.json there already matches)."""
    params = {"n_reads_per_lane": n_reads, "contig_lengths": contig_lengths, "seed": seed,
              "qualities_from": os.path.basename(reads_fq), "version": 1}
    pfile = os.path.join(out_dir, "params.json")
    outputs = ["ref.fa"] + [f"lane{l}.{e}" for l in (1, 2) for e in ("fq", "sam", "bam")]
    if os.path.exists(pfile) and all(os.path.exists(os.path.join(out_dir, f)) for f in outputs):
        with open(pfile) as f:
            if json.load(f) == params:
                return params
    os.makedirs(out_dir, exist_ok=True)
    if os.path.exists(pfile):
        os.remove(pfile)
    rng = random.Random(seed)
    quals = real_qualities(reads_fq)
    ref = reference(rng, contig_lengths)
    with open(os.path.join(out_dir, "ref.fa"), "w") as f:
        for name, s in ref.items():
            f.write(f">{name}\n")
            for i in range(0, len(s), 60):
                f.write(s[i:i + 60] + "\n")
    names = list(ref)
    weights = [len(ref[n]) for n in names]
    for lane in (1, 2):
        fq = open(os.path.join(out_dir, f"lane{lane}.fq"), "w")
        sam = open(os.path.join(out_dir, f"lane{lane}.sam"), "w")
        sam.write("@HD\tVN:1.6\tSO:unsorted\n")
        for n in names:
            sam.write(f"@SQ\tSN:{n}\tLN:{len(ref[n])}\n")
        sam.write(f"@RG\tID:lane{lane}\tSM:sample\tPL:ILLUMINA\tLB:lib1\tPU:flowcell.{lane}\n")
        sam.write("@PG\tID:presso-bench\tPN:presso-bench-genomics\tVN:1\n")
        for i in range(n_reads):
            qual = rng.choice(quals)
            length = len(qual)
            chrom = rng.choices(names, weights=weights)[0]
            pos = rng.randrange(0, len(ref[chrom]) - length)
            template = ref[chrom][pos:pos + length]
            reverse = rng.random() < 0.5
            # The sequencer reads the fragment 5'->3' on its strand: errors follow that order.
            sequenced = template.translate(COMP)[::-1] if reverse else template
            read, nm = _errors(rng, sequenced, qual)
            name = f"SIM:{lane}:{1101 + i // 400000}:{(i * 7919) % 20000 + 1000}:{i % 200000 + 1000}"
            fq.write(f"@{name}\n{read}\n+\n{qual}\n")
            seq, q = (read.translate(COMP)[::-1], qual[::-1]) if reverse else (read, qual)
            flag = 16 if reverse else 0
            sam.write(f"{name}\t{flag}\t{chrom}\t{pos + 1}\t60\t{length}M\t*\t0\t0\t{seq}\t{q}\t"
                      f"NM:i:{nm}\tRG:Z:lane{lane}\n")
        fq.close()
        sam.close()
        sysutil.run(["samtools", "view", "-b", "-o", os.path.join(out_dir, f"lane{lane}.bam"),
                     os.path.join(out_dir, f"lane{lane}.sam")], timeout=3600)
    with open(pfile, "w") as f:
        json.dump(params, f)
    return params
