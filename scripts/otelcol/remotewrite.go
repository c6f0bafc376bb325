// A minimal Prometheus remote-write exporter, for the end-to-end tests only.
//
// Why it is here: the tests need a backend that stores exemplars (Prometheus
// with --enable-feature=exemplar-storage). Debian's Prometheus builds (2.53 in
// trixie, 3.5 in sid) leave out the OTLP receiver, and the Collector's
// prometheusremotewrite exporter lives in collector-contrib, which Debian does
// not package. So this exporter does what that one does for the data the tests
// send, and Prometheus takes it on its remote-write receiver
// (--web.enable-remote-write-receiver):
//
//   - names and labels by github.com/prometheus/otlptranslator (Prometheus's own
//     translation: unit and _total suffixes, dots to underscores);
//   - every resource attribute becomes a label (as contrib's
//     resource_to_telemetry_conversion does, and as VictoriaMetrics does);
//   - gauges and sums as one series each (monotonic cumulative sums get
//     _total), explicit-bucket histograms as _bucket{le}, _sum and _count;
//   - each exemplar of a histogram point on the _bucket series of the first
//     bound at or above its value (+Inf past the last), labelled trace_id and
//     span_id (lowercase hex), as Prometheus's OTLP receiver and contrib do;
//     the exemplars of a sum on its series;
//   - delta temporality, exponential histograms and summaries are dropped
//     (the package sends none of them), and so are points flagged
//     no-recorded-value.
//
// The request is remote-write 1.0 (prometheus.WriteRequest), encoded with
// protowire and snappy (block format), as Prometheus expects.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/otlptranslator"
	"google.golang.org/protobuf/encoding/protowire"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/config/configretry"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

const remoteWriteType = "remotewrite"

// remoteWriteConfig: where to send, and how long one request may take.
type remoteWriteConfig struct {
	Endpoint string        `mapstructure:"endpoint"`
	Timeout  time.Duration `mapstructure:"timeout"`
}

func (c *remoteWriteConfig) Validate() error {
	if c.Endpoint == "" {
		return errors.New("endpoint is required (Prometheus: http://HOST:PORT/api/v1/write)")
	}
	if c.Timeout <= 0 {
		return fmt.Errorf("timeout must be positive, got %v", c.Timeout)
	}
	return nil
}

func newRemoteWriteFactory() exporter.Factory {
	return exporter.NewFactory(
		component.MustNewType(remoteWriteType),
		func() component.Config { return &remoteWriteConfig{Timeout: 10 * time.Second} },
		exporter.WithMetrics(createRemoteWrite, component.StabilityLevelDevelopment),
	)
}

func createRemoteWrite(ctx context.Context, set exporter.Settings, cfg component.Config) (exporter.Metrics, error) {
	c := cfg.(*remoteWriteConfig)
	w := &remoteWriter{endpoint: c.Endpoint, client: &http.Client{Timeout: c.Timeout}}
	return exporterhelper.NewMetrics(ctx, set, cfg, w.push,
		exporterhelper.WithCapabilities(consumer.Capabilities{MutatesData: false}),
		exporterhelper.WithTimeout(exporterhelper.TimeoutConfig{Timeout: 0}), // the client's
		exporterhelper.WithRetry(configretry.NewDefaultBackOffConfig()),
	)
}

type remoteWriter struct {
	endpoint string
	client   *http.Client
}

// label is one name=value pair; series are kept by their sorted labels.
type label struct{ name, value string }

type sample struct {
	value float64
	ms    int64
}

type exemplar struct {
	labels []label
	value  float64
	ms     int64
}

type series struct {
	labels    []label
	samples   []sample
	exemplars []exemplar
}

// batch gathers the series of one request, each labelset once.
type batch struct {
	byKey map[string]*series
	order []string
}

func (b *batch) add(labels []label, s sample, exemplars []exemplar) {
	sort.Slice(labels, func(i, j int) bool { return labels[i].name < labels[j].name })
	var key strings.Builder
	for _, l := range labels {
		key.WriteString(l.name)
		key.WriteByte(0)
		key.WriteString(l.value)
		key.WriteByte(0)
	}
	k := key.String()
	found, ok := b.byKey[k]
	if !ok {
		found = &series{labels: labels}
		b.byKey[k] = found
		b.order = append(b.order, k)
	}
	found.samples = append(found.samples, s)
	found.exemplars = append(found.exemplars, exemplars...)
}

var (
	metricNamer = otlptranslator.MetricNamer{WithMetricSuffixes: true}
	labelNamer  = otlptranslator.LabelNamer{}
)

// withLabels returns base plus the attributes of attrs, named for Prometheus;
// two attributes that map to one name keep both values, joined by ';'.
func withLabels(base []label, attrs pcommon.Map) []label {
	out := append([]label(nil), base...)
	index := make(map[string]int, len(out))
	for i, l := range out {
		index[l.name] = i
	}
	attrs.Range(func(k string, v pcommon.Value) bool {
		name, err := labelNamer.Build(k)
		if err != nil {
			return true
		}
		if i, ok := index[name]; ok {
			out[i].value += ";" + v.AsString()
			return true
		}
		index[name] = len(out)
		out = append(out, label{name, v.AsString()})
		return true
	})
	return out
}

func with(labels []label, extra ...label) []label {
	return append(append([]label(nil), labels...), extra...)
}

func millis(t pcommon.Timestamp) int64 { return int64(t) / int64(time.Millisecond) }

func convertExemplars(src pmetric.ExemplarSlice) []exemplar {
	out := make([]exemplar, 0, src.Len())
	for i := 0; i < src.Len(); i++ {
		e := src.At(i)
		var labels []label
		if !e.TraceID().IsEmpty() {
			labels = append(labels, label{"trace_id", e.TraceID().String()})
		}
		if !e.SpanID().IsEmpty() {
			labels = append(labels, label{"span_id", e.SpanID().String()})
		}
		value := e.DoubleValue()
		if e.ValueType() == pmetric.ExemplarValueTypeInt {
			value = float64(e.IntValue())
		}
		out = append(out, exemplar{labels: labels, value: value, ms: millis(e.Timestamp())})
	}
	return out
}

func numberValue(p pmetric.NumberDataPoint) float64 {
	if p.ValueType() == pmetric.NumberDataPointValueTypeInt {
		return float64(p.IntValue())
	}
	return p.DoubleValue()
}

func addNumbers(b *batch, name string, resource []label, points pmetric.NumberDataPointSlice, keepExemplars bool) {
	for i := 0; i < points.Len(); i++ {
		p := points.At(i)
		if p.Flags().NoRecordedValue() {
			continue
		}
		var exemplars []exemplar
		if keepExemplars {
			exemplars = convertExemplars(p.Exemplars())
		}
		labels := withLabels(with(resource, label{"__name__", name}), p.Attributes())
		b.add(labels, sample{numberValue(p), millis(p.Timestamp())}, exemplars)
	}
}

func formatBound(bound float64) string {
	if math.IsInf(bound, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(bound, 'f', -1, 64)
}

func addHistogram(b *batch, name string, resource []label, points pmetric.HistogramDataPointSlice) {
	for i := 0; i < points.Len(); i++ {
		p := points.At(i)
		if p.Flags().NoRecordedValue() {
			continue
		}
		ms := millis(p.Timestamp())
		attrs := withLabels(resource, p.Attributes())
		bounds := append(p.ExplicitBounds().AsRaw(), math.Inf(1))
		counts := p.BucketCounts().AsRaw()
		// Each exemplar goes to the first bucket whose bound holds its value.
		byBucket := make([][]exemplar, len(bounds))
		for _, e := range convertExemplars(p.Exemplars()) {
			j := sort.SearchFloat64s(bounds, e.value)
			byBucket[j] = append(byBucket[j], e)
		}
		var cumulative uint64
		for j, bound := range bounds {
			if j < len(counts) {
				cumulative += counts[j]
			}
			labels := with(attrs, label{"__name__", name + "_bucket"}, label{"le", formatBound(bound)})
			b.add(labels, sample{float64(cumulative), ms}, byBucket[j])
		}
		if p.HasSum() {
			b.add(with(attrs, label{"__name__", name + "_sum"}), sample{p.Sum(), ms}, nil)
		}
		b.add(with(attrs, label{"__name__", name + "_count"}), sample{float64(p.Count()), ms}, nil)
	}
}

func resourceLabels(r pcommon.Resource) []label { return withLabels(nil, r.Attributes()) }

func (w *remoteWriter) translate(md pmetric.Metrics) *batch {
	b := &batch{byKey: map[string]*series{}}
	rms := md.ResourceMetrics()
	for i := 0; i < rms.Len(); i++ {
		rm := rms.At(i)
		resource := resourceLabels(rm.Resource())
		sms := rm.ScopeMetrics()
		for j := 0; j < sms.Len(); j++ {
			ms := sms.At(j).Metrics()
			for k := 0; k < ms.Len(); k++ {
				m := ms.At(k)
				var kind otlptranslator.MetricType
				switch m.Type() {
				case pmetric.MetricTypeGauge:
					kind = otlptranslator.MetricTypeGauge
				case pmetric.MetricTypeSum:
					if m.Sum().AggregationTemporality() != pmetric.AggregationTemporalityCumulative {
						continue
					}
					kind = otlptranslator.MetricTypeNonMonotonicCounter
					if m.Sum().IsMonotonic() {
						kind = otlptranslator.MetricTypeMonotonicCounter
					}
				case pmetric.MetricTypeHistogram:
					if m.Histogram().AggregationTemporality() != pmetric.AggregationTemporalityCumulative {
						continue
					}
					kind = otlptranslator.MetricTypeHistogram
				default:
					continue
				}
				name, err := metricNamer.Build(otlptranslator.Metric{Name: m.Name(), Unit: m.Unit(), Type: kind})
				if err != nil {
					continue
				}
				switch m.Type() {
				case pmetric.MetricTypeGauge:
					addNumbers(b, name, resource, m.Gauge().DataPoints(), false)
				case pmetric.MetricTypeSum:
					addNumbers(b, name, resource, m.Sum().DataPoints(), true)
				case pmetric.MetricTypeHistogram:
					addHistogram(b, name, resource, m.Histogram().DataPoints())
				}
			}
		}
	}
	return b
}

// --- prometheus.WriteRequest, by hand (prompb/remote.proto, types.proto) ---

func appendMessage(b []byte, field protowire.Number, body []byte) []byte {
	b = protowire.AppendTag(b, field, protowire.BytesType)
	return protowire.AppendBytes(b, body)
}

func encodeLabels(b []byte, field protowire.Number, labels []label) []byte {
	for _, l := range labels {
		var body []byte
		body = protowire.AppendTag(body, 1, protowire.BytesType)
		body = protowire.AppendString(body, l.name)
		body = protowire.AppendTag(body, 2, protowire.BytesType)
		body = protowire.AppendString(body, l.value)
		b = appendMessage(b, field, body)
	}
	return b
}

func encodeValueAndTime(body []byte, valueField, timeField protowire.Number, v float64, ms int64) []byte {
	body = protowire.AppendTag(body, valueField, protowire.Fixed64Type)
	body = protowire.AppendFixed64(body, math.Float64bits(v))
	body = protowire.AppendTag(body, timeField, protowire.VarintType)
	return protowire.AppendVarint(body, uint64(ms))
}

func (b *batch) encode() []byte {
	var out []byte
	for _, k := range b.order {
		s := b.byKey[k]
		sort.SliceStable(s.samples, func(i, j int) bool { return s.samples[i].ms < s.samples[j].ms })
		sort.SliceStable(s.exemplars, func(i, j int) bool { return s.exemplars[i].ms < s.exemplars[j].ms })
		ts := encodeLabels(nil, 1, s.labels) // TimeSeries.labels
		for _, smp := range s.samples {      // TimeSeries.samples: Sample{value=1, timestamp=2}
			ts = appendMessage(ts, 2, encodeValueAndTime(nil, 1, 2, smp.value, smp.ms))
		}
		for _, e := range s.exemplars { // TimeSeries.exemplars: Exemplar{labels=1, value=2, timestamp=3}
			body := encodeLabels(nil, 1, e.labels)
			ts = appendMessage(ts, 3, encodeValueAndTime(body, 2, 3, e.value, e.ms))
		}
		out = appendMessage(out, 1, ts) // WriteRequest.timeseries
	}
	return out
}

func (w *remoteWriter) push(ctx context.Context, md pmetric.Metrics) error {
	b := w.translate(md)
	if len(b.order) == 0 {
		return nil
	}
	body := snappy.Encode(nil, b.encode())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.endpoint, bytes.NewReader(body))
	if err != nil {
		return consumererror.NewPermanent(err)
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("Content-Encoding", "snappy")
	req.Header.Set("X-Prometheus-Remote-Write-Version", "0.1.0")
	resp, err := w.client.Do(req)
	if err != nil {
		return err // retried
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		return nil
	}
	text, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	err = fmt.Errorf("remote write to %s: %s: %s", w.endpoint, resp.Status, bytes.TrimSpace(text))
	if resp.StatusCode/100 == 4 { // bad data (out of order, invalid): retrying cannot help
		return consumererror.NewPermanent(err)
	}
	return err
}
