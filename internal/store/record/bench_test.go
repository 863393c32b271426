package record

import "testing"

// BenchmarkEncode and BenchmarkDecode time both versions on typicalTask.

func BenchmarkEncode(b *testing.B) {
	tk := typicalTask()
	for _, enc := range encoders {
		b.Run(enc.name, func(b *testing.B) {
			b.ReportAllocs()
			var rec []byte
			for b.Loop() {
				var err error
				if rec, err = enc.encode(tk); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(rec)), "record-bytes")
		})
	}
	b.Run("v2-append", func(b *testing.B) {
		buf := make([]byte, 0, 1024)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := AppendEncode(buf[:0], tk); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkDecode(b *testing.B) {
	tk := typicalTask()
	for _, enc := range encoders {
		b.Run(enc.name, func(b *testing.B) {
			rec, err := enc.encode(tk)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Decode(rec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
